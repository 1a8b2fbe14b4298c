#include "phub/sim/streams.h"

#include <simgrid/s4u.hpp>

#include <cstdint>
#include <memory>

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {
struct Message {
  std::string to;
  double bytes;
  void* what;
};
}  // namespace

int* Token() {
  static int token = 0;
  return &token;
}

Stream Stream::Open(const std::string& name, sg4::Host* from) {
  sg4::Mailbox* queue = sg4::Mailbox::by_name("queue:" + name);
  sg4::Actor::create(name, from, [queue] {
    // Queued messages land at once (eager): Send never waits for the message before it to
    // leave, as a socket's buffer takes a send while the one before is on the wire, so a
    // worker's backward goes on while its pushes queue.
    queue->set_receiver(sg4::Actor::self());
    for (;;) {
      std::unique_ptr<Message> m(queue->get<Message>());
      sg4::Mailbox::by_name(m->to)->put(m->what, static_cast<std::uint64_t>(m->bytes));
    }
  })->daemonize();  // the simulation ends when the workers do
  return Stream(queue);
}

void Stream::Send(const std::string& to, double bytes, void* what) const {
  // On the same host: no link, no time.
  queue_->put(new Message{to, bytes, what != nullptr ? what : Token()}, 0);
}

void* Receive(const std::string& box) { return sg4::Mailbox::by_name(box)->get<void>(); }

void Own(const std::string& box) { sg4::Mailbox::by_name(box)->set_receiver(sg4::Actor::self()); }

}  // namespace phub::sim
