// A connection in the simulation: messages queued on it leave one after another, as a TCP
// connection streams them in order (the connections of one host share its link, each getting
// its max-min share). Its sender is an actor on the sending host; Send returns at once.
#pragma once

#include <string>

namespace simgrid::s4u {
class Host;
class Mailbox;
}

namespace phub::sim {

class Stream {
 public:
  Stream() = default;
  // Starts the sender on `from`; `name` must be unique in the simulation.
  static Stream Open(const std::string& name, simgrid::s4u::Host* from);
  // Queues `bytes` for mailbox `to`: they arrive there once those queued before have left.
  // `what` (by default Token()) is what the receiver gets: which chunk, where one mailbox
  // takes many.
  void Send(const std::string& to, double bytes, void* what = nullptr) const;

 private:
  explicit Stream(simgrid::s4u::Mailbox* queue) : queue_(queue) {}
  simgrid::s4u::Mailbox* queue_ = nullptr;
};

// What every simulated message carries: SimGrid moves sizes, not bytes.
int* Token();

// Receives one message on `box` (which this actor must own: set_receiver, so that messages
// flow as soon as they are sent, not when they are asked for), and returns what it carries.
void* Receive(const std::string& box);
// Makes the calling actor the permanent receiver of `box`.
void Own(const std::string& box);

}  // namespace phub::sim
