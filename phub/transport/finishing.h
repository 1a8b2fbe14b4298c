// What a stream transport's Finish keeps while it runs (connection.h: Finish, FinishDone): its
// caller, its limit, how it ended; and how a closing connection fails what is still queued.
// TCP and shm share it, so both end a Finish and fail a queue the same way, word for word.
// Lives on the connection's thread, as the connection does.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "phub/transport/connection.h"

namespace phub::transport {

class Finishing {
 public:
  Finishing(Connection::FinishDone done, const boost::asio::any_io_executor& executor)
      : done_(std::move(done)), limit_(executor) {}

  // A second Finish: its caller hears when this one ends.
  void Chain(Connection::FinishDone done);
  // After `limit`, unless the connection closed first, `end` gets DeadlineExceeded naming
  // `peer` (the connection then ends the Finish with it).
  void Arm(std::chrono::milliseconds limit, const std::string& peer,
           std::function<void(const Status&)> end);
  // How the Finish ended, by its own end (the peer's end, a reset, the limit); the close follows.
  void set_how(const Status& how) { how_ = how; }
  // The connection closed with `why`: the caller hears how the Finish ended — its own end if it
  // had one, else `why` (a local Close: Cancelled; never OK).
  void Closed(const Status& why);

  bool writing_ended = false;  // this side's end went behind everything queued

 private:
  Connection::FinishDone done_;
  boost::asio::steady_timer limit_;
  std::optional<Status> how_;
};

// What queued sends fail with when their connection closes with `why`.
Status QueuedSendError(const Status& why);

// Fails every send of a closing connection's queue (each with a `done`), in order, once: the
// queue is taken first, so a callback that sends again meets a closed connection.
template <typename Queue>
void FailQueued(Queue& queue, const Status& why) {
  Queue failed;
  failed.swap(queue);
  const Status error = QueuedSendError(why);
  for (auto& pending : failed) {
    if (pending.done) pending.done(error);
  }
}

}  // namespace phub::transport
