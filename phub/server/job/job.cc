// A job's lifecycle, on the control plane's thread: its members' Hellos, the phase deadlines
// (forming, attaching, leaving, stalled), the shards' events, a stall, and the end of the job.
// Its start (the shards installed once every worker has said Hello, the Welcomes) is
// job_start.cc; recovery job_recovery.cc; checkpoints job_checkpoints.cc.
#include "phub/server/job/job.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/admission/job_limits.h"
#include "spdlog/spdlog.h"

namespace phub::server {

Job::Job(Host host, std::string name, JobRole role, std::uint64_t id, std::uint32_t world_size,
         std::uint64_t charge_bytes, double weight)
    : host_(std::move(host)),
      name_(std::move(name)),
      role_(role),
      id_(id),
      world_size_(world_size),
      charge_bytes_(charge_bytes),
      weight_(weight),
      log_name_(absl::StrCat("job '", name_, "'")),
      members_(world_size_),
      ranks_(world_size_),
      deadline_{boost::asio::steady_timer(host_.io)},
      values_timer_(host_.io),
      restore_timer_(host_.io),
      elastic_timer_(host_.io) {}

Job::~Job() {
  AbandonInstall();
  *alive_ = false;
  if (uplink_) uplink_->Stop();
  // Shards outlive nothing: a job destroyed while running (phubd stopping) removes its own.
  if (spec_) {
    for (auto& core : host_.cores) core->RemoveShard(spec_->session);
  }
}

std::uint32_t Job::connected() const {
  std::uint32_t n = 0;
  for (const SessionPtr& member : members_) n += member ? 1 : 0;
  return n;
}

std::uint32_t Job::members() const {
  std::uint32_t n = 0;
  for (const SessionPtr& member : members_) n += member ? 1 : 0;
  return n;
}

std::optional<std::chrono::steady_clock::time_point> Job::rejoin_deadline() const {
  if (!running_ || stalled_ || deadline_.kind != Deadline::kRejoin) return std::nullopt;
  return deadline_.timer.expiry();
}

std::uint64_t Job::model_bytes() const {
  if (!running_ || !spec_) return 0;
  std::uint64_t bytes = 0;
  for (const keys::Chunk& chunk : spec_->table.chunks()) bytes += chunk.bytes();
  return bytes;
}

void Job::OnHello(const SessionPtr& session, const proto::Hello& hello) {
  if (IsRejoin(hello)) return Rejoin(session, hello);
  if (elastic_.enabled && running_ && !stalled_ && !ended_) return ElasticJoin(session, hello);
  if (running_ || ended_) {
    return Refuse(session,
                  MakeError(proto::Error::BAD_REQUEST,
                            absl::StrCat(log_name_, " (", world_size_,
                                         " workers) is running on this phubd"),
                            "give the new job another name (phub-worker --job), or wait until "
                            "this one ends"));
  }
  const proto::Hello* first = nullptr;
  std::vector<bool> taken(world_size_, false);
  for (std::uint32_t r = 0; r < world_size_; ++r) {
    if (members_[r]) {
      taken[r] = true;
      first = &members_[r]->hello;
    }
  }
  // The token was the control plane's to check (it chose this job by it).
  std::optional<proto::Error> error =
      CheckHello(hello, host_.admission, first, taken);
  // A rack's part of a job over several racks resumes nothing (its homes' part does). An
  // accepted Hello's role is the job's (CheckHello).
  if (!error && host_.resume.snapshot && !role_.relays_upstream()) {
    error = CheckResumedModel(hello, host_.admission.optimizer, *host_.resume.snapshot,
                              host_.resume.path);
  }
  if (!error && !host_.resume.snapshot && !role_.relays_upstream() && !started_) {
    error = CheckNotResumedElsewhere(hello);
  }
  if (!error) error = CheckJobLimits(hello, host_.admission);
  if (!error && !started_ && joined_ == 0) ConfigureElastic(hello);
  if (error) {
    spdlog::warn("{}: refusing a worker from {}: {}", log_name_, session->peer, error->message());
    Refuse(session, *error);
    // A job whose first Hello was refused has no member to end it: it ends here, so that its
    // name, memory charge and --max-jobs place are not held by nobody. (A starting job ends
    // once its install is in: Installed.)
    if (joined_ == 0 && !started_ && !starting_) End();
    return;
  }
  Join(session, hello);
}

void Job::Join(const SessionPtr& session, const proto::Hello& hello) {
  session->deadline.cancel();
  session->state = SessionState::kJoined;
  session->rank = hello.rank();
  session->hello = hello;
  session->job = shared_from_this();
  members_[hello.rank()] = session;
  ++joined_;
  // Which host is which rank: the line an operator greps for when a rank misbehaves.
  spdlog::info("{}: rank {} joined from {} ({}/{})", log_name_, hello.rank(),
               Escaped(session->peer), joined_,
               elastic_.enabled ? elastic_.start : world_size_);
  if (joined_ == 1) {
    ArmDeadline(Deadline::kForming, deadlines().form_timeout_ms, [this] {
      std::string missing;
      int listed = 0;
      const std::uint32_t needed = elastic_.enabled ? elastic_.start : world_size_;
      for (std::uint32_t r = 0; r < needed && listed < 16; ++r) {
        if (!members_[r]) absl::StrAppend(&missing, listed++ ? ", " : "", r);
      }
      if (listed >= 16) absl::StrAppend(&missing, ", ...");
      FailForming(MakeError(
          proto::Error::TIMEOUT,
          absl::StrCat(log_name_, " did not form within ", deadlines().form_timeout_ms,
                       " ms: ", joined_, " of ",
                       elastic_.enabled ? elastic_.start : world_size_,
                       " workers joined (missing ranks: ",
                       missing, ")"),
          "start every worker within --form-timeout-ms of the first, or raise it"));
    });
  }
  host_.sessions.ReadNext(session);  // notices a worker that leaves, or misbehaves, meanwhile
  // While the job starts, a Hello takes a rank given back meanwhile, or (elastic) joins.
  if (ReadyToStart() && !starting_) Start();
  // Until its Welcome, the install included (or nothing, if the start already failed).
  BeatWhileForming(session);
}

// A worker cannot tell a forming job from a stopped phubd by silence (the kernel accepts its
// connection and Hello either way): while the job forms, phubd says it is there.
void Job::BeatWhileForming(const SessionPtr& session) {
  // Bounds: a Heartbeat per 100 ms per member at most; and at least one a minute.
  constexpr std::uint32_t kFastestMs = 100, kSlowestMs = 60000;
  const std::uint32_t asked = session->hello.forming_heartbeat_ms();
  if (asked == 0 || session->state != SessionState::kJoined || running_ || ended_) return;
  proto::ControlMessage heartbeat;
  heartbeat.mutable_heartbeat();
  Send(session, heartbeat);
  session->forming_beat.expires_after(
      std::chrono::milliseconds(std::clamp(asked, kFastestMs, kSlowestMs)));
  session->forming_beat.async_wait([this, weak = std::weak_ptr<Session>(session),
                                    alive = alive_](const boost::system::error_code& ec) {
    SessionPtr member = weak.lock();
    if (!*alive || ec || !member || member->job.get() != this) return;
    BeatWhileForming(member);
  });
}

void Job::OnGoodbye(const SessionPtr& session) {
  // Nothing may follow a Goodbye: the session ends here, whether or not the peer closes (one
  // that stays silent must not hold the job).
  session->state = SessionState::kLeaving;
  ranks_[session->rank].left_cleanly = true;
}

void Job::MemberGone(const SessionPtr& session, SessionState was, const Status& why) {
  const auto rank = static_cast<std::uint32_t>(session->rank);
  if (members_[rank] != session) return;  // replaced by its rejoin already
  members_[rank].reset();
  if (was == SessionState::kJoined) {
    spdlog::warn("{}: rank {} left before the job started: {}", log_name_, rank, why.message());
    // Nobody forms it any more: the name is free (a starting job's once its install is in).
    if (--joined_ == 0 && !running_ && !starting_) End();
    return;
  }
  // In the running job.
  --live_members_;
  if (elastic_.enabled && !host_.stopping && running_) {
    if (was == SessionState::kInJob) {
      ElasticLoss(rank, absl::StrCat("disconnected without goodbye: ", why.message()));
    } else if (was == SessionState::kLeaving) {
      ElasticGoodbye(rank);
    }
    // The last member gone by Goodbye ends the job; a job whose members were all lost holds
    // its weights for joiners (a torchrun restart) until --rejoin-timeout-ms (CheckMinimum).
    if (running_ && live_members_ == 0 &&
        (was == SessionState::kLeaving || stalled_ || elastic_.ending)) {
      End();
    }
    return;
  }
  if (was == SessionState::kInJob && !host_.stopping) {
    MemberLost(rank, absl::StrCat("disconnected without goodbye: ", why.message()));
  } else if (was == SessionState::kLeaving && running_) {
    ArmLeaveDeadline(rank);
  }
  // A job waiting for a lost member to rejoin goes on with nobody connected.
  if (running_ && live_members_ == 0 && (stalled_ || missing_count_ == 0)) End();
}

// One timer bounds every phase of a job in which members could hold phubd: forming
// (--form-timeout-ms), attaching after the Welcome (--attach-timeout-ms), the others' leave after
// a Goodbye (--leave-timeout-ms), closing a stalled job (--stalled-job-timeout-ms).
void Job::ArmDeadline(Deadline kind, int timeout_ms, std::function<void()> fire) {
  const std::uint64_t generation = ++deadline_.generation;
  deadline_.kind = kind;
  deadline_.timer.expires_after(std::chrono::milliseconds(timeout_ms));
  deadline_.timer.async_wait([this, generation, fire = std::move(fire),
                        alive = alive_](const boost::system::error_code& ec) {
    // A wait cancelled, or one that fired just as the job moved on: nothing to do.
    if (!*alive || ec || generation != deadline_.generation) return;
    deadline_.kind = Deadline::kNone;
    fire();
  });
}

void Job::CancelDeadline() {
  ++deadline_.generation;
  deadline_.kind = Deadline::kNone;
  deadline_.timer.cancel();
}

// A member said Goodbye: the job cannot take another iteration, so the others must follow
// within --leave-timeout-ms (one that stays connected and silent would hold phubd for good).
// A stalled job's shorter deadline, or this one already running, is left as it is.
void Job::ArmLeaveDeadline(std::int64_t first_to_leave) {
  // A deadline already running that ends the job sooner or differently stays: a stall's, a
  // lost member's rejoin (it stalls the job if nobody comes back), the attach deadline.
  if (stalled_ || deadline_.kind == Deadline::kLeaving || deadline_.kind == Deadline::kStalled ||
      deadline_.kind == Deadline::kRejoin || deadline_.kind == Deadline::kAttaching) {
    return;
  }
  ArmDeadline(Deadline::kLeaving, deadlines().leave_timeout_ms, [this, first_to_leave] {
    const proto::Error error = MakeError(
        proto::Error::TIMEOUT,
        absl::StrCat("still in ", log_name_, " ", deadlines().leave_timeout_ms,
                     " ms after rank ", first_to_leave, " said goodbye (--leave-timeout-ms)"),
        "end every worker's run with the same number of iterations, or raise --leave-timeout-ms");
    auto members = members_;
    for (auto& member : members) {
      if (member) Refuse(member, error);
    }
    // Nobody left to end it (members lost and awaited count as not live): end it here.
    if (!ended_ && running_ && live_members_ == 0) End();
  });
}

void Job::FailForming(const proto::Error& error) {
  spdlog::error("{}: cannot start: {} ({})", log_name_, error.message(), error.fix());
  auto members = members_;
  for (auto& member : members) {
    if (member) Refuse(member, error);  // frees the rank; the last one ends the job
  }
}

void Job::OnShardEvent(const ShardEvent& event) {
  if (!running_) return;
  if (event.kind == ShardEvent::Kind::kSnapshot) return OnSnapshot(event);
  if (event.kind == ShardEvent::Kind::kAwaitingValues) return AwaitValues(event.iteration);
  if (event.kind == ShardEvent::Kind::kAllAttached) {
    if (++cores_attached_ < host_.cores.size()) return;
    // Events are posted: one may be older than the latest join. Ask every core now.
    if (elastic_.enabled && !elastic_.joiners_attached && JoinersAttached()) {
      elastic_.joiners_attached = true;
      BeginChange();
    }
    if (deadline_.kind == Deadline::kAttaching) CancelDeadline();
    if (deadline_.kind == Deadline::kRejoin && missing_count_ == 0) {
      CancelDeadline();
      Notify("every worker is back: the job goes on");
    }
    return;
  }
  if (event.kind == ShardEvent::Kind::kLeftEarly) {
    // A clean leave is still a loss when the others go on pushing: they must be told.
    return Stall(absl::StrCat("core ", event.core, ": ", event.reason));
  }
  if (event.kind != ShardEvent::Kind::kWorkerLost) return;
  if (elastic_.enabled) {
    // A connection of a rank dropped already (a late report), or of one that said Goodbye and
    // whose BYE never came: no chunk must wait for it.
    if (event.epoch != ranks_[event.rank].forgets || !members_[event.rank]) {
      if (event.epoch == ranks_[event.rank].forgets) DropOnCores(static_cast<std::uint32_t>(event.rank));
      return;
    }
  }
  if (ranks_[event.rank].left_cleanly) return;  // its data connections close after its Goodbye
  // A connection of the rank's earlier life, closed before phubd forgot it but handled after:
  // not the rejoined worker's.
  if (event.epoch != ranks_[event.rank].forgets) return;
  const std::string why =
      absl::StrCat("core ", event.core, " lost its data connection: ", event.reason);
  // The worker cannot go on without it: its session ends too, and the job waits for a rejoin
  // (MemberLost). One already gone was handled when it went.
  if (const SessionPtr member = members_[event.rank]) {
    return Refuse(member, MakeError(proto::Error::CONNECTION_LOST, why,
                                    "restart the worker with the same rank: it rejoins the job"));
  }
  if (!ranks_[event.rank].missing) Stall(absl::StrCat("rank ", event.rank, ": ", why));
}

void Job::Stall(const std::string& reason) {
  if (stalled_) return;
  stalled_ = true;
  stall_reason_ = reason;
  ++host_.counters.stalls;
  spdlog::error("{} stalled: {}; its other workers are told, phubd and other jobs go on",
                log_name_, reason);
  proto::ControlMessage message;
  *message.mutable_error() =
      MakeError(proto::Error::JOB_STALLED, absl::StrCat(log_name_, " stalled: ", reason),
                "restart the job (all workers); phubd is still up");
  for (auto& member : members_) {
    if (member) Send(member, message);
  }
  // Members that stay connected to a job that cannot go on must not hold phubd for good.
  ArmDeadline(Deadline::kStalled, deadlines().stalled_job_timeout_ms, [this] {
    auto members = members_;
    for (auto& member : members) {
      if (!member) continue;
      host_.sessions.Drop(member, absl::DeadlineExceededError(absl::StrCat(
                                      "still connected ", deadlines().stalled_job_timeout_ms,
                                      " ms after the job stalled (--stalled-job-timeout-ms)")));
    }
  });
}

bool Job::StalledWithWeights() const {
  return started_ && stalled_ && elastic_.enabled && role_.kind() == JobRole::Kind::kFlat &&
         progress_.Iteration() >= 1;
}

void Job::EndIfRunning() {
  if (!ended_) End();
}

void Job::End() {
  if (ended_) return;
  AbandonInstall();  // phubd stopping while the job starts: waits for its install, removes it
  ended_ = true;
  CancelDeadline();
  values_timer_.cancel();
  restore_timer_.cancel();
  elastic_timer_.cancel();
  // Its checkpoints are on disk before its end is logged.
  FlushPendingCheckpoint();
  // The relay first: after Stop it posts nothing to the shards about to go.
  if (uplink_) uplink_->Stop();
  if (running_) {
    ShardStats total;
    for (auto& core : host_.cores) {
      ShardStats s = core->RemoveShard(spec_->session);
      total.aggregations += s.aggregations;
      total.bytes_in += s.bytes_in;
      total.bytes_out += s.bytes_out;
      total.cpu_seconds += s.cpu_seconds;
    }
    // The cores' CPU per byte received is what sizes a PBox (docs/design.md "Sizing a PBox").
    spdlog::info("{} ended{}: {} chunk aggregations, {:.1f} MiB in, {:.1f} MiB out, cores' "
                 "CPU {:.3f} s ({:.3f} ns per byte in)",
                 log_name_, stalled_ ? " (stalled)" : "", total.aggregations,
                 total.bytes_in / 1048576.0, total.bytes_out / 1048576.0, total.cpu_seconds,
                 total.bytes_in ? 1e9 * total.cpu_seconds / static_cast<double>(total.bytes_in)
                                : 0.0);
    ++host_.counters.ended;
  }
  running_ = false;
  spec_.reset();
  uplink_.reset();
  gathering_.snapshot.reset();
  auto members = members_;
  for (auto& member : members_) member.reset();
  for (auto& member : members) {
    if (member) member->job.reset();
  }
  if (host_.on_end) host_.on_end(*this);
}

}  // namespace phub::server
