#include "phub/server/control_plane.h"

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <new>
#include <random>

#include <algorithm>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/common/token_proof.h"
#include "phub/common/version.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/initial_weights.h"
#include "phub/server/admission/job_tokens.h"
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
    case proto::ControlMessage::kChallenge: return "Challenge";
    case proto::ControlMessage::kStepValues: return "StepValues";
    case proto::ControlMessage::kStateRequest: return "StateRequest";
    case proto::ControlMessage::kStatePiece: return "StatePiece";
    case proto::ControlMessage::kStateEnd: return "StateEnd";
    case proto::ControlMessage::kStateRestore: return "StateRestore";
    case proto::ControlMessage::kMembership: return "Membership";
    case proto::ControlMessage::kMembershipAck: return "MembershipAck";
    case proto::ControlMessage::kLeaveRequest: return "LeaveRequest";
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
      stalled_names_(std::chrono::milliseconds(options.jobs.deadlines.stalled_name_memory_ms)),
      pending_(options.control.pending),
      liveness_timer_(context) {}

ControlPlane::~ControlPlane() {
  *alive_ = false;
  // Jobs hold their members' sessions and the sessions their jobs: break the cycles.
  for (auto& [id, session] : sessions_) session->job.reset();
  jobs_.clear();
}

Status ControlPlane::Start() {
  PHUB_ASSIGN_OR_RETURN(listener_, transport::SocketListener::Bind(
                                       context_, options_.cores.listen_address, options_.port,
                                       options_.data_plane.tcp));
  listener_->Start([this](asio::ip::tcp::socket socket) { OnAccept(std::move(socket)); });
  ArmLiveness();
  return absl::OkStatus();
}

void ControlPlane::Stop() {
  if (stopping_) return;  // ending a job below may call back here (--one-job)
  stopping_ = true;
  if (listener_) listener_->Stop();
  liveness_timer_.cancel();
  auto sessions = sessions_;
  for (auto& [id, session] : sessions) Drop(session, absl::CancelledError("phubd is stopping"));
  auto jobs = jobs_;
  for (auto& [name, job] : jobs) job->EndIfRunning();
}

bool ControlPlane::CheckpointBeforeStop() {
  bool all_written = true;
  for (auto& [name, job] : jobs_) all_written &= job->CheckpointNow().ok();
  return all_written;
}

void ControlPlane::ArmLiveness() {
  const int timeout_ms = options_.jobs.deadlines.liveness_timeout_ms;
  if (timeout_ms <= 0 || stopping_) return;
  liveness_timer_.expires_after(std::chrono::milliseconds(std::max(1, timeout_ms / 4)));
  liveness_timer_.async_wait([this, alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    const auto now = std::chrono::steady_clock::now();
    auto jobs = jobs_;
    for (auto& [name, job] : jobs) job->CheckLiveness(now);
    ArmLiveness();
  });
}

void ControlPlane::OnAccept(asio::ip::tcp::socket socket) {
  const ControlLimits& limits = options_.control;
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
  session->source = ec ? "unknown" : endpoint.address().to_string();
  session->peer = ec ? "unknown peer" : absl::StrCat(session->source, ":", endpoint.port());
  session->decoder = std::make_shared<transport::ControlFrameDecoder>(
      transport::ControlFrameLimits{.max_frame_bytes = limits.max_control_frame_bytes,
                                         .max_tensors = options_.admission.limits.max_tensors});
  if (!AdmitPending(session, !ec && endpoint.address().is_loopback())) return;
  session->deadline.expires_after(std::chrono::milliseconds(limits.hello_timeout_ms));
  session->deadline.async_wait([this, weak = std::weak_ptr<Session>(session),
                                alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec) return;
    auto s = weak.lock();
    if (!s || s->state != SessionState::kAwaitingHello) return;
    Refuse(s, MakeError(proto::Error::TIMEOUT,
                        absl::StrCat("no Hello within ", options_.control.hello_timeout_ms,
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
        if (!*alive || session->state == SessionState::kClosed) return;
        if (m.ok()) return OnMessage(session, std::move(*m));
        if (!absl::IsInvalidArgument(m.status())) return Drop(session, m.status());
        // The peer sent a frame over a limit (the message names it and its flag) or garbage.
        const auto& limits = session->decoder->limits();
        const std::string what(m.status().message());
        const bool over_limit = absl::StrContains(what, limits.frame_flag) ||
                                absl::StrContains(what, limits.tensors_flag);
        if (auto suppressed = bad_frame_log_.Allow()) {
          spdlog::warn("control connection from {}: {}{}", session->peer, Bounded(what, 400),
                       LogLimiter::Note(*suppressed));
        }
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
    case SessionState::kAwaitingHello:
      if (message.has_hello()) return OnHello(session, message.hello());
      return Refuse(session, Unexpected(message, "before the Hello"));
    case SessionState::kJoined:
      // One Hello per connection; anything else while the job forms gives the rank back.
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " while its job forms")));
    case SessionState::kInJob:
      if (message.has_goodbye()) {
        spdlog::info("job '{}': rank {} says goodbye after {} iterations",
                     session->job ? session->job->name() : "?", session->rank,
                     message.goodbye().iterations());
        if (session->job) session->job->OnGoodbye(session);
        return Drop(session, absl::OkStatus());
      }
      if (message.has_heartbeat()) return ReadNext(session);  // last_heard is all it is for
      if (message.has_state_request() || message.has_state_piece() ||
          message.has_state_restore()) {
        if (const std::shared_ptr<Job> job = session->job) {
          if (message.has_state_request()) job->OnStateRequest(session);
          if (message.has_state_piece()) job->OnStatePiece(session, message.state_piece());
          if (message.has_state_restore()) job->OnStateRestore(session, message.state_restore());
        }
        if (session->state == SessionState::kInJob) ReadNext(session);
        return;
      }
      if (message.has_membership_ack() || message.has_leave_request()) {
        if (const std::shared_ptr<Job> job = session->job) {
          if (message.has_membership_ack()) job->OnMembershipAck(session, message.membership_ack());
          if (message.has_leave_request()) job->OnLeaveRequest(session);
        }
        if (session->state == SessionState::kInJob) ReadNext(session);
        return;
      }
      if (message.has_step_values()) {
        if (session->job) session->job->OnStepValues(session, message.step_values());
        // A refused message ended the session (Drop); else the next one.
        if (session->state == SessionState::kInJob) ReadNext(session);
        return;
      }
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " in a running job")));
    case SessionState::kLeaving:
      return Refuse(session, Unexpected(message, absl::StrCat("from rank ", session->rank,
                                                              " after its Goodbye")));
    case SessionState::kClosed:
      return;
  }
}

void ControlPlane::OnHello(const SessionPtr& session, const proto::Hello& hello) {
  const auto refuse = [&](const proto::Error& error) {
    if (auto suppressed = refusal_log_.Allow()) {
      spdlog::warn("refusing a worker from {}: {}{}", session->peer, Bounded(error.message(), 1024),
                   LogLimiter::Note(*suppressed));
    }
    Refuse(session, error);
  };
  StatusOr<std::string> name = JobName(hello.job());
  if (!name.ok()) {
    return refuse(MakeError(proto::Error::BAD_REQUEST, std::string(name.status().message()),
                            "give every worker of the job such a name (phub-worker --job)"));
  }
  // The token first, before anything about the job is said or held: a peer without it learns
  // nothing of the job (not even whether it exists) and can change nothing of it.
  const SharingOptions& sharing = options_.admission.sharing;
  StatusOr<std::string> token = ExpectedToken(sharing, *name);
  if (!token.ok() && !absl::IsNotFound(token.status())) {
    // The operator's file is wrong (empty, a directory, too big): say so to the operator, and
    // to the worker only what any refused worker hears.
    if (auto suppressed = token_file_log_.Allow()) {
      spdlog::error("job '{}': {}; its workers are refused until the file holds a token{}",
                    *name, token.status().message(), LogLimiter::Note(*suppressed));
    }
  }
  if (!token.ok() || !ProofMatches(hello.token_proof(), *token, session->nonce, hello.job())) {
    if (auto suppressed = refusal_log_.Allow()) {
      spdlog::warn("refusing a worker from {}: no valid token for job '{}'{}", session->peer,
                   *name, LogLimiter::Note(*suppressed));
    }
    return RefuseToken(session, MakeError(
        proto::Error::BAD_TOKEN,
        absl::StrCat("the token for job '", *name, "' does not match phubd's",
                     sharing.job_tokens_dir.empty() ? "" : " (--job-tokens)"),
        sharing.job_tokens_dir.empty()
            ? "give the worker the same --token-file as phubd"
            : "give the worker the token file the operator issued for this job name"));
  }
  pending_.Done(session->id);  // it proved itself: no longer a stranger's connection
  proto::Error refusal;
  const JobRole role = JobRole::Of(hello);
  std::shared_ptr<Job> job =
      FindOrAdmit(role.JobKey(*name), role, hello, session->source, refusal);
  if (!job) return refuse(refusal);
  job->OnHello(session, hello);
}

void ControlPlane::JobEnded(Job& job) {
  NoLongerForming(job);
  if (job.StalledWithWeights()) {
    stalled_names_.Remember(job.name(), job.stall_reason(), std::chrono::steady_clock::now());
  }
  if (charged_jobs_.erase(job.id()) > 0) {
    charged_bytes_ -= std::min(charged_bytes_, job.charge_bytes());
  }
  // The name is free at once (FindOrAdmit replaces an ended job); the object goes once no
  // caller on the stack holds it. By id, not address: a new job of the same name may sit at
  // the ended one's address by then.
  asio::post(context_, [this, alive = alive_, name = job.name(), id = job.id()] {
    if (!*alive) return;
    if (auto it = jobs_.find(name); it != jobs_.end() && it->second->id() == id) {
      jobs_.erase(it);
    }
  });
  // Only a job that started has ended (--one-job); one that never formed just goes.
  if (job.started() && on_job_end_) on_job_end_();
}

// The one place a session ends, whatever its state: the job's accounting stays exact.
void ControlPlane::Drop(const SessionPtr& session, const Status& why,
                        const proto::Error* farewell) {
  if (session->state == SessionState::kClosed) return;
  const SessionState was = session->state;
  session->state = SessionState::kClosed;
  sessions_.erase(session->id);
  pending_.Done(session->id);
  session->deadline.cancel();
  if (was == SessionState::kAwaitingHello && !stopping_) ++hellos_refused_;
  if (farewell != nullptr) {
    proto::ControlMessage message;
    *message.mutable_error() = *farewell;
    session->close_when_flushed = true;
    SendControl(session, message);
    // A peer that does not read its Error does not keep the connection.
    session->deadline.expires_after(kFarewellTimeout);
    session->deadline.async_wait([session](const boost::system::error_code& ec) {
      if (!ec) CloseSessionSocket(*session);
    });
  } else {
    CloseSessionSocket(*session);
  }
  // Its job's accounting follows (the job may end here).
  if (std::shared_ptr<Job> job = std::move(session->job)) job->MemberGone(session, was, why);
}

}  // namespace phub::server
