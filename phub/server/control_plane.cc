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
#include "phub/transport/tcp/control_channel.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;
using transport::tcp::AsyncReadControlMessage;
using transport::tcp::FrameControlMessage;

namespace {

// How long a refused peer gets to read its Error before the connection is closed anyway.
constexpr std::chrono::milliseconds kFarewellTimeout{1000};
// At most one log line per this interval about connections refused for --max-connections.
constexpr std::chrono::seconds kRefusalLogInterval{10};

std::vector<keys::TensorSpec> TensorsOf(const proto::Hello& hello) {
  std::vector<keys::TensorSpec> tensors;
  tensors.reserve(hello.tensors_size());
  for (const auto& t : hello.tensors()) tensors.push_back({t.name(), t.elements()});
  return tensors;
}

std::string KindOf(const proto::ControlMessage& message) {
  switch (message.body_case()) {
    case proto::ControlMessage::kHello: return "Hello";
    case proto::ControlMessage::kWelcome: return "Welcome";
    case proto::ControlMessage::kError: return "Error";
    case proto::ControlMessage::kGoodbye: return "Goodbye";
    case proto::ControlMessage::kVerbsEndpoint: return "VerbsEndpoint";
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
      job_deadline_(context) {
  members_.resize(options_.world_size);
}

ControlPlane::~ControlPlane() { *alive_ = false; }

Status ControlPlane::Start() {
  PHUB_ASSIGN_OR_RETURN(listener_, transport::tcp::TcpListener::Bind(
                                       context_, options_.listen_address, options_.port,
                                       options_.tcp));
  listener_->Start([this](asio::ip::tcp::socket socket) { OnAccept(std::move(socket)); });
  return absl::OkStatus();
}

void ControlPlane::Stop() {
  if (stopping_) return;  // ending the job below may call back here (--one-job)
  stopping_ = true;
  if (listener_) listener_->Stop();
  CancelJobDeadline();
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
  session->decoder = std::make_shared<transport::tcp::ControlFrameDecoder>(
      transport::tcp::ControlFrameLimits{.max_frame_bytes = limits.max_control_frame_bytes,
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

// One timer bounds every phase of a job in which members could hold phubd: forming
// (--form-timeout-ms), attaching after the Welcome (--attach-timeout-ms), the others' leave after
// a Goodbye (--leave-timeout-ms), closing a stalled job (--stalled-job-timeout-ms).
void ControlPlane::ArmJobDeadline(JobDeadline kind, int timeout_ms, std::function<void()> fire) {
  const std::uint64_t generation = ++job_deadline_generation_;
  job_deadline_kind_ = kind;
  job_deadline_.expires_after(std::chrono::milliseconds(timeout_ms));
  job_deadline_.async_wait([this, generation, fire = std::move(fire),
                            alive = alive_](const boost::system::error_code& ec) {
    // A wait cancelled, or one that fired just as the job it was for moved on: nothing to do.
    if (!*alive || ec || generation != job_deadline_generation_) return;
    job_deadline_kind_ = JobDeadline::kNone;
    fire();
  });
}

void ControlPlane::CancelJobDeadline() {
  ++job_deadline_generation_;
  job_deadline_kind_ = JobDeadline::kNone;
  job_deadline_.cancel();
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
  if (was == State::kInJob && !stopping_) {
    Stall(absl::StrCat("rank ", rank, " disconnected without goodbye (", why.message(), ")"));
  }
  members_[rank].reset();
  if (--live_members_ == 0) EndJob();
}

// A member said Goodbye: the job cannot take another iteration, so the others must follow
// within --leave-timeout-ms (one that stays connected and silent would hold phubd for good).
// A stalled job's shorter deadline, or this one already running, is left as it is.
void ControlPlane::ArmLeaveDeadline(std::int64_t first_to_leave) {
  if (stalled_ || job_deadline_kind_ == JobDeadline::kLeaving ||
      job_deadline_kind_ == JobDeadline::kStalled) {
    return;
  }
  ArmJobDeadline(JobDeadline::kLeaving, options_.limits.leave_timeout_ms, [this, first_to_leave] {
    const proto::Error error = MakeError(
        proto::Error::TIMEOUT,
        absl::StrCat("still in the job ", options_.limits.leave_timeout_ms, " ms after rank ",
                     first_to_leave, " said goodbye (--leave-timeout-ms)"),
        "end every worker's run with the same number of iterations, or raise --leave-timeout-ms");
    auto members = members_;
    for (auto& member : members) {
      if (member) Refuse(member, error);
    }
  });
}

void ControlPlane::FailForming(const proto::Error& error) {
  spdlog::error("cannot start the job: {} ({})", error.message(), error.fix());
  auto members = members_;
  for (auto& member : members) {
    if (member) Refuse(member, error);  // frees the rank
  }
}

void ControlPlane::StartJob() {
  CancelJobDeadline();
  // Everything a job allocates is bounded by CheckJobLimits; a failed allocation is still the
  // job's refusal (RESOURCE_EXHAUSTED), never the daemon's end.
  StatusOr<keys::KeyTable> table = absl::UnknownError("not built");
  std::vector<float> initial_weights;
  try {
    table = keys::KeyTable::Build(TensorsOf(members_[0]->hello), options_.chunk_bytes,
                                  static_cast<std::uint32_t>(cores_.size()));
    if (table.ok() && !options_.initial_weights_path.empty()) {
      auto weights = LoadInitialWeights(options_.initial_weights_path, *table);
      if (!weights.ok()) {
        return FailForming(MakeError(proto::Error::BAD_INITIAL_WEIGHTS,
                                     std::string(weights.status().message()),
                                     "give phubd an --init-weights file made for this model"));
      }
      initial_weights = std::move(*weights);
    }
  } catch (const std::bad_alloc&) {
    return FailForming(MakeError(proto::Error::RESOURCE_EXHAUSTED,
                                 "phubd ran out of memory building the job's key table",
                                 "a smaller model or fewer chunks (a larger --chunk-bytes); "
                                 "lower --max-model-bytes so such jobs are refused up front"));
  }
  if (!table.ok()) {
    return FailForming(MakeError(proto::Error::BAD_REQUEST, std::string(table.status().message()),
                                 "fix phubd's --chunk-bytes or the model"));
  }
  auto job = std::make_shared<JobSpec>(JobSpec{
      .table = std::move(*table),
      .world_size = options_.world_size,
      .optimizer = options_.optimizer,
      .session = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32),
      .initial_weights = std::move(initial_weights)});
  std::shared_ptr<const JobSpec> spec = job;
  auto sink = [this, alive = alive_](ShardEvent event) {
    asio::post(context_, [this, alive, event = std::move(event)] {
      if (*alive) OnShardEvent(event);
    });
  };
  for (auto& core : cores_) {
    if (Status s = core->InstallShard(spec, sink); !s.ok()) {
      for (auto& installed : cores_) installed->RemoveShard();
      const bool memory = absl::IsResourceExhausted(s);
      return FailForming(MakeError(
          memory ? proto::Error::RESOURCE_EXHAUSTED : proto::Error::BAD_REQUEST,
          std::string(s.message()),
          memory ? "a smaller model, or lower --max-model-bytes so such jobs are refused up front"
                 : "see phubd's log; on verbs check the memlock limit (ulimit -l)"));
    }
  }

  proto::ControlMessage message;
  proto::Welcome& welcome = *message.mutable_welcome();
  welcome.set_protocol_version(kProtocolVersion);
  welcome.set_chunk_bytes(spec->table.chunk_bytes());
  for (auto owner : spec->table.owners()) welcome.add_chunk_owner(owner);
  welcome.set_session(spec->session);
  welcome.set_weights_from_server(!spec->initial_weights.empty());
  welcome.set_optimizer(kernels::Describe(options_.optimizer));
  welcome.set_transport(transport::TransportName(options_.transport));
  running_ = true;
  stalled_ = false;
  cores_attached_ = 0;
  live_members_ = options_.world_size;
  left_cleanly_.assign(options_.world_size, false);
  ++jobs_started_;
  for (auto& member : members_) {
    member->state = State::kInJob;
    // Workers reach the data ports at the address they reached the control port on.
    boost::system::error_code ec;
    std::string host = member->socket.local_endpoint(ec).address().to_string();
    welcome.clear_cores();
    for (auto& core : cores_) {
      proto::CoreEndpoint& endpoint = *welcome.add_cores();
      endpoint.set_server(0);
      endpoint.set_core(core->index());
      endpoint.set_host(host);
      endpoint.set_port(core->port());
    }
    Send(member, message);
  }
  // A member that took its Welcome but never attaches would hold the job (and phubd) for good.
  ArmJobDeadline(JobDeadline::kAttaching, options_.limits.attach_timeout_ms, [this] {
    Stall(absl::StrCat("not every worker attached to every core within ",
                       options_.limits.attach_timeout_ms, " ms of the job's start (",
                       cores_attached_, " of ", cores_.size(),
                       " cores have all their workers; --attach-timeout-ms)"));
  });
  spdlog::info("job {} started: {} workers, {} tensors, {} chunks of {} bytes over {} cores, {}",
               jobs_started_, options_.world_size, spec->table.tensors().size(),
               spec->table.chunks().size(), spec->table.chunk_bytes(), cores_.size(),
               welcome.optimizer());
}

void ControlPlane::OnShardEvent(const ShardEvent& event) {
  if (!running_) return;
  if (event.kind == ShardEvent::Kind::kAllAttached) {
    if (++cores_attached_ == cores_.size() && job_deadline_kind_ == JobDeadline::kAttaching) {
      CancelJobDeadline();
    }
    return;
  }
  if (event.kind == ShardEvent::Kind::kLeftEarly) {
    // A clean leave is still a loss when the others go on pushing: they must be told.
    return Stall(absl::StrCat("core ", event.core, ": ", event.reason));
  }
  if (event.kind != ShardEvent::Kind::kWorkerLost) return;
  if (left_cleanly_[event.rank]) return;  // its data connections close after its Goodbye
  Stall(absl::StrCat("core ", event.core, " lost rank ", event.rank, ": ", event.reason));
}

void ControlPlane::Stall(const std::string& reason) {
  if (stalled_) return;
  stalled_ = true;
  spdlog::error("job {} stalled: {}; the other workers are told, phubd keeps running",
                jobs_started_, reason);
  proto::ControlMessage message;
  *message.mutable_error() =
      MakeError(proto::Error::JOB_STALLED, absl::StrCat("job stalled: ", reason),
                "restart the job (all workers); phubd is still up");
  for (auto& member : members_) {
    if (member) Send(member, message);
  }
  // Members that stay connected to a job that cannot go on must not hold phubd for good.
  ArmJobDeadline(JobDeadline::kStalled, options_.limits.stalled_job_timeout_ms, [this] {
    auto members = members_;
    for (auto& member : members) {
      if (!member) continue;
      Drop(member, absl::DeadlineExceededError(absl::StrCat(
                       "still connected ", options_.limits.stalled_job_timeout_ms,
                       " ms after the job stalled (--stalled-job-timeout-ms)")));
    }
  });
}

void ControlPlane::EndJob() {
  CancelJobDeadline();
  ShardStats total;
  for (auto& core : cores_) {
    ShardStats s = core->RemoveShard();
    total.aggregations += s.aggregations;
    total.bytes_in += s.bytes_in;
    total.bytes_out += s.bytes_out;
  }
  spdlog::info("job {} ended{}: {} chunk aggregations, {:.1f} MiB in, {:.1f} MiB out",
               jobs_started_, stalled_ ? " (stalled)" : "", total.aggregations,
               total.bytes_in / 1048576.0, total.bytes_out / 1048576.0);
  running_ = false;
  stalled_ = false;
  joined_ = 0;
  for (auto& member : members_) member.reset();
  if (on_job_end_) on_job_end_();
}

}  // namespace phub::server
