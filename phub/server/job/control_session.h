// One worker's control connection on phubd, and the one way to write to it. The control plane
// (control_plane.h) owns sessions and ends them (SessionEnder::Drop); a Job (job.h) holds the
// sessions of its members and asks the control plane to end them.
//
// A session is in exactly one state, and every state handles every message: what the state
// does not expect is refused with an Error and the session dropped.
//
//   awaiting Hello --Hello ok--> joined (job forming) --job formed--> in job --Goodbye--> (ends)
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "phub/common/status.h"
#include "phub/transport/control_frame.h"
#include "proto/phub.pb.h"

namespace phub::server {

class Job;

enum class SessionState { kAwaitingHello, kJoined, kInJob, kLeaving, kClosed };

struct Session {
  Session(boost::asio::ip::tcp::socket s, boost::asio::io_context& context)
      : socket(std::move(s)), deadline(context), forming_beat(context) {}
  boost::asio::ip::tcp::socket socket;
  boost::asio::steady_timer deadline;  // the Hello's
  // While its job forms: the next Heartbeat its Hello asked for (forming_heartbeat_ms).
  boost::asio::steady_timer forming_beat;
  std::shared_ptr<transport::ControlFrameDecoder> decoder;
  std::uint64_t id = 0;
  SessionState state = SessionState::kAwaitingHello;
  std::int64_t rank = -1;  // set once its Hello is accepted
  std::string peer;        // for logs
  std::string source;      // the peer's address without its port: its quotas' key
  std::string nonce;       // the Challenge it was sent; its Hello's token proof answers it
  proto::Hello hello;
  // The job it joined (from its accepted Hello until it ends); the control plane owns jobs.
  std::shared_ptr<Job> job;
  std::chrono::steady_clock::time_point last_heard{};  // any message; liveness
  // Frames waiting to be written: asynchronous writes on one socket must not overlap.
  std::deque<std::shared_ptr<std::string>> outbox;
  bool writing = false;
  bool close_when_flushed = false;  // dropped with a farewell Error still to write
};
using SessionPtr = std::shared_ptr<Session>;

// Queues `message` on the session's socket (written in order; nothing once it is closed).
void SendControl(const SessionPtr& session, const proto::ControlMessage& message);
void CloseSessionSocket(Session& session);

// Ends sessions: the control plane, for the jobs that hold them.
class SessionEnder {
 public:
  virtual ~SessionEnder() = default;
  // The one place a session ends, whatever its state; sends `farewell` first if given.
  virtual void Drop(const SessionPtr& session, const Status& why,
                    const proto::Error* farewell = nullptr) = 0;
  void Refuse(const SessionPtr& session, const proto::Error& error) {
    Drop(session, absl::FailedPreconditionError(error.message()), &error);
  }
  // Reads the session's next message (a rejoined member's).
  virtual void ReadNext(const SessionPtr& session) = 0;
};

}  // namespace phub::server
