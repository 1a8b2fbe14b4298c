#include "phub/server/control_plane.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <new>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/common/version.h"
#include "phub/server/hello_check.h"
#include "phub/server/initial_weights.h"
#include "phub/server/job_limits.h"
#include "phub/transport/control_channel.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;
using transport::AsyncReadControlMessage;
using transport::FrameControlMessage;

namespace {

// How long a refused peer gets to read its Error before the connection is closed anyway.
constexpr std::chrono::milliseconds kFarewellTimeout{1000};
// At most one log line per this interval about connections refused for --max-connections.
constexpr std::chrono::seconds kRefusalLogInterval{10};


std::string KindOf(const proto::ControlMessage& message) {
  switch (message.body_case()) {
    case proto::ControlMessage::kHello: return "Hello";
    case proto::ControlMessage::kWelcome: return "Welcome";
    case proto::ControlMessage::kError: return "Error";
    case proto::ControlMessage::kGoodbye: return "Goodbye";
    case proto::ControlMessage::kVerbsEndpoint: return "VerbsEndpoint";
    case proto::ControlMessage::kHeartbeat: return "Heartbeat";
    case proto::ControlMessage::kNotice: return "Notice";
    case proto::ControlMessage::BODY_NOT_SET: return "an empty message";
  }
  return "an unknown message";
}

proto::Error Unexpected(const proto::ControlMessage& message, const std::string& when) {
  return MakeError(proto::Error::BAD_REQUEST,
                   absl::StrCat("unexpected ", KindOf(message), " ", when),
                   "connect with PsClient: one Hello per control connection, then only Goodbye");
}

}  // namespace

ControlPlane::ControlPlane(asio::io_context& context, const ServerOptions& options,
                           std::vector<std::unique_ptr<ServerCore>>& cores,
                           std::function<void()> on_job_end)
    : context_(context),
      options_(options),
      cores_(cores),
      on_job_end_(std::move(on_job_end)),
      job_deadline_(context),
      liveness_timer_(context) {
  members_.resize(options_.world_size);
  missing_.assign(options_.world_size, 0);
  resume_point_.assign(options_.world_size, 0);
  forgets_.assign(options_.world_size, 0);
  if (!options_.checkpoint.dir.empty()) {
    checkpoints_ = std::make_unique<CheckpointWriter>(
        options_.checkpoint.dir, [this, alive = alive_](std::function<void()> done) {
          asio::post(context_, [alive, done = std::move(done)] {
            if (*alive) done();
          });
        });
  }
}

ControlPlane::~ControlPlane() { *alive_ = false; }

Status ControlPlane::Start() {
  PHUB_ASSIGN_OR_RETURN(listener_, transport::SocketListener::Bind(
                                       context_, options_.listen_address, options_.port,
                                       options_.tcp));
  listener_->Start([this](asio::ip::tcp::socket socket) { OnAccept(std::move(socket)); });
  ArmLiveness();
  return absl::OkStatus();
}

void ControlPlane::Stop() {
  if (stopping_) return;  // ending the job below may call back here (--one-job)
  stopping_ = true;
  if (listener_) listener_->Stop();
  CancelJobDeadline();
  liveness_timer_.cancel();
  auto sessions = sessions_;
  for (auto& [id, session] : sessions) Drop(session, absl::CancelledError("phubd is stopping"));
  if (running_) EndJob();
}

void ControlPlane::OnAccept(asio::ip::tcp::socket socket) {
  const ServerLimits& limits = options_.limits;
  if (sessions_.size() >= limits.max_connections) {
    // Closed at once (the socket goes out of scope): a flood of idle connections costs one
    // descriptor for a moment each, and a log line per interval, not one each.
    ++refused_for_connections_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_refusal_log_ >= kRefusalLogInterval) {
      spdlog::warn("refused {} control connection(s): {} are open, the limit is {} "
                   "(--max-connections)",
                   refused_for_connections_, sessions_.size(), limits.max_connections);
      refused_for_connections_ = 0;
      last_refusal_log_ = now;
    }
    return;
  }
  auto session = std::make_shared<Session>(std::move(socket), context_);
  session->id = next_session_id_++;
  boost::system::error_code ec;
  auto endpoint = session->socket.remote_endpoint(ec);
  session->peer = ec ? "unknown peer" : absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
  session->decoder = std::make_shared<transport::ControlFrameDecoder>(
      transport::ControlFrameLimits{.max_frame_bytes = limits.max_control_frame_bytes,
                                         .max_tensors = limits.max_tensors});
  sessions_[session->id] = session;
  session->deadline.expires_after(std::chrono::milliseconds(limits.hello_timeout_ms));
  session->deadline.async_wait([this, weak = std::weak_ptr<Session>(session),
                                alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    auto s = weak.lock();
    if (!s || s->state != State::kAwaitingHello) return;
    Refuse(s, MakeError(proto::Error::TIMEOUT,
                        absl::StrCat("no Hello within ", options_.limits.hello_timeout_ms,
                                     " ms of connecting"),
                        "send the Hello right after connecting (PsClient does); on a slow "
                        "network raise phubd's --hello-timeout-ms"));
  });
  ReadNext(session);
}

void ControlPlane::ReadNext(const SessionPtr& session) {
  AsyncReadControlMessage(
      session->socket, session->decoder,
      [this, session, alive = alive_](StatusOr<proto::ControlMessage> m) {
        if (!*alive || session->state == State::kClosed) return;
        if (m.ok()) return OnMessage(session, std::move(*m));
        if (!absl::IsInvalidArgument(m.status())) return Drop(session, m.status());
        // The peer sent a frame over a limit (the message names it and its flag) or garbage.
        const auto& limits = session->decoder->limits();
        const std::string what(m.status().message());
        const bool over_limit = absl::StrContains(what, limits.frame_flag) ||
                                absl::StrContains(what, limits.tensors_flag);
        spdlog::warn("control connection from {}: {}", session->peer, Bounded(what, 400));
        Refuse(session,
               MakeError(over_limit ? proto::Error::LIMIT_EXCEEDED : proto::Error::BAD_REQUEST,
                         what,
                         over_limit ? "raise the flag the message names, if the model is real"
                                    : "connect with PsClient (a PHub control connection)"));
      });
}

void ControlPlane::OnMessage(const SessionPtr& session, proto::ControlMessage message) {
  session->last_heard = std::chrono::steady_clock::now();
  switch (session->state) {
    case State::kAwaitingHello:
      if (message.has_hello()) return OnHello(session, message.hello());
      return Refuse(session, Unexpected(message, "before the Hello"));
    case State::kJoined:
      // One Hello per connection; anything else while the job forms gives the rank back.
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " while its job forms")));
    case State::kInJob:
      if (message.has_goodbye()) {
        // Nothing may follow a Goodbye: the session ends here, whether or not the peer
        // closes (one that stays silent must not hold the job).
        spdlog::info("rank {} says goodbye after {} iterations", session->rank,
                     message.goodbye().iterations());
        session->state = State::kLeaving;
        left_cleanly_[session->rank] = true;
        Drop(session, absl::OkStatus());
        if (running_) ArmLeaveDeadline(session->rank);
        return;
      }
      if (message.has_heartbeat()) return ReadNext(session);  // last_heard is all it is for
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " in a running job")));
    case State::kLeaving:
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " after its Goodbye")));
    case State::kClosed:
      return;
  }
}

void ControlPlane::OnHello(const SessionPtr& session, const proto::Hello& hello) {
  if (IsRejoin(hello)) return Rejoin(session, hello);
  if (running_) {
    return Refuse(session,
                  MakeError(proto::Error::BAD_REQUEST,
                            absl::StrCat("a job of ", options_.world_size,
                                         " workers is running on this phubd"),
                            "wait until it ends, or start another phubd on another --port"));
  }
  const proto::Hello* first = nullptr;
  std::vector<bool> taken(options_.world_size, false);
  for (std::uint32_t r = 0; r < options_.world_size; ++r) {
    if (members_[r]) {
      taken[r] = true;
      first = &members_[r]->hello;
    }
  }
  std::optional<proto::Error> error = CheckHello(hello, options_, first, taken);
  if (!error && resume_) error = CheckResumedModel(hello, options_, *resume_, resume_path_);
  if (!error) error = CheckJobLimits(hello, options_);
  if (error) {
    spdlog::warn("refusing a worker from {}: {}", session->peer, error->message());
    return Refuse(session, *error);
  }
  session->deadline.cancel();
  session->state = State::kJoined;
  session->rank = hello.rank();
  session->hello = hello;
  members_[hello.rank()] = session;
  ++joined_;
  spdlog::info("rank {} joined ({}/{})", hello.rank(), joined_, options_.world_size);
  if (joined_ == 1) {
    ArmJobDeadline(JobDeadline::kForming, options_.limits.form_timeout_ms, [this] {
      std::string missing;
      int listed = 0;
      for (std::uint32_t r = 0; r < options_.world_size && listed < 16; ++r) {
        if (!members_[r]) absl::StrAppend(&missing, listed++ ? ", " : "", r);
      }
      if (options_.world_size - joined_ > 16) absl::StrAppend(&missing, ", ...");
      FailForming(MakeError(
          proto::Error::TIMEOUT,
          absl::StrCat("the job did not form within ", options_.limits.form_timeout_ms,
                       " ms: ", joined_, " of ", options_.world_size,
                       " workers joined (missing ranks: ", missing, ")"),
          "start every worker within --form-timeout-ms of the first, or raise it"));
    });
  }
  ReadNext(session);  // notices a worker that leaves, or misbehaves, while the job forms
  if (joined_ == options_.world_size) StartJob();
}

void ControlPlane::Send(const SessionPtr& session, const proto::ControlMessage& message) {
  if (!session->socket.is_open()) return;
  session->outbox.push_back(FrameControlMessage(message));
  if (!session->writing) WriteQueued(session);
}

void ControlPlane::WriteQueued(const SessionPtr& session) {
  if (session->outbox.empty()) {
    session->writing = false;
    if (session->close_when_flushed) CloseSocket(*session);
    return;
  }
  session->writing = true;
  std::shared_ptr<std::string> framed = session->outbox.front();
  asio::async_write(session->socket, asio::buffer(*framed),
                    [session, framed](const boost::system::error_code& ec, std::size_t) {
                      session->outbox.pop_front();
                      if (ec) {  // the read side reports the peer's end; just stop writing
                        session->outbox.clear();
                        session->writing = false;
                        return CloseSocket(*session);
                      }
                      WriteQueued(session);
                    });
}

void ControlPlane::CloseSocket(Session& session) {
  boost::system::error_code ignored;
  session.socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  session.socket.close(ignored);
}

void ControlPlane::Refuse(const SessionPtr& session, const proto::Error& error) {
  Drop(session, absl::FailedPreconditionError(error.message()), &error);
}

// The one place a session ends, whatever its state: the job's accounting stays exact.
void ControlPlane::Drop(const SessionPtr& session, const Status& why,
                        const proto::Error* farewell) {
  if (session->state == State::kClosed) return;
  const State was = session->state;
  session->state = State::kClosed;
  sessions_.erase(session->id);
  session->deadline.cancel();
  if (was == State::kAwaitingHello && !stopping_) ++hellos_refused_;
  if (farewell != nullptr) {
    proto::ControlMessage message;
    *message.mutable_error() = *farewell;
    session->close_when_flushed = true;
    Send(session, message);
    // A peer that does not read its Error does not keep the connection.
    session->deadline.expires_after(kFarewellTimeout);
    session->deadline.async_wait([session](const boost::system::error_code& ec) {
      if (!ec) CloseSocket(*session);
    });
  } else {
    CloseSocket(*session);
  }
  if (was == State::kAwaitingHello) return;
  const auto rank = static_cast<std::uint32_t>(session->rank);
  if (was == State::kJoined) {
    spdlog::warn("rank {} left before the job started: {}", rank, why.message());
    members_[rank].reset();
    if (--joined_ == 0 && !running_) CancelJobDeadline();
    return;
  }
  // In the running job.
  members_[rank].reset();
  --live_members_;
  if (was == State::kInJob && !stopping_) {
    MemberLost(rank, absl::StrCat("disconnected without goodbye: ", why.message()));
  }
  // A job waiting for a lost member to rejoin goes on with nobody connected.
  if (running_ && live_members_ == 0 && (stalled_ || missing_count_ == 0)) EndJob();
}

}  // namespace phub::server
