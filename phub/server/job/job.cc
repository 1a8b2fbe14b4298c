// A job's lifecycle, on the control plane's thread: its members' Hellos, the shards installed
// once every worker has said Hello, the Welcome, the phase deadlines (forming, attaching,
// leaving, stalled), and the end of the job. Recovery and checkpoints are in job_recovery.cc.
#include "phub/server/job/job.h"

#include <boost/asio/post.hpp>
#include <filesystem>
#include <new>
#include <random>

#include "absl/strings/str_cat.h"
#include "phub/common/version.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/initial_weights.h"
#include "phub/server/admission/job_limits.h"
#include "phub/server/checkpoint/snapshot_buffers.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;

namespace {
std::vector<keys::TensorSpec> TensorsOf(const proto::Hello& hello) {
  std::vector<keys::TensorSpec> tensors;
  tensors.reserve(hello.tensors_size());
  for (const auto& t : hello.tensors()) tensors.push_back({t.name(), t.elements()});
  return tensors;
}
}  // namespace

Job::Job(Host host, std::string name, std::uint64_t id, std::uint32_t world_size,
         std::uint64_t charge_bytes, double weight)
    : host_(std::move(host)),
      name_(std::move(name)),
      id_(id),
      world_size_(world_size),
      charge_bytes_(charge_bytes),
      weight_(weight),
      log_name_(absl::StrCat("job '", name_, "'")),
      deadline_(host_.io) {
  members_.resize(world_size_);
  missing_.assign(world_size_, 0);
  resume_point_.assign(world_size_, 0);
  forgets_.assign(world_size_, 0);
  left_cleanly_.assign(world_size_, false);
}

Job::~Job() {
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

std::uint64_t Job::model_bytes() const {
  if (!running_ || !spec_) return 0;
  std::uint64_t bytes = 0;
  for (const keys::Chunk& chunk : spec_->table.chunks()) bytes += chunk.bytes();
  return bytes;
}

void Job::OnHello(const SessionPtr& session, const proto::Hello& hello) {
  if (IsRejoin(hello)) return Rejoin(session, hello);
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
      CheckHello(hello, options(), hello.job_token(), first, taken);
  // A rack's part of a job over several racks resumes nothing (its homes' part does).
  const bool relaying = hello.racks() > 1 && hello.rack_workers() == 0;
  if (!error && host_.resume.snapshot && !relaying) {
    error = CheckResumedModel(hello, options(), *host_.resume.snapshot, host_.resume.path);
  }
  if (!error) error = CheckJobLimits(hello, options());
  if (error) {
    spdlog::warn("{}: refusing a worker from {}: {}", log_name_, session->peer, error->message());
    Refuse(session, *error);
    // A job whose first Hello was refused has no member to end it: it ends here, so that its
    // name, memory charge and --max-jobs place are not held by nobody.
    if (joined_ == 0 && !started_) End();
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
  spdlog::info("{}: rank {} joined ({}/{})", log_name_, hello.rank(), joined_, world_size_);
  if (joined_ == 1) {
    ArmDeadline(Deadline::kForming, options().limits.form_timeout_ms, [this] {
      std::string missing;
      int listed = 0;
      for (std::uint32_t r = 0; r < world_size_ && listed < 16; ++r) {
        if (!members_[r]) absl::StrAppend(&missing, listed++ ? ", " : "", r);
      }
      if (world_size_ - joined_ > 16) absl::StrAppend(&missing, ", ...");
      FailForming(MakeError(
          proto::Error::TIMEOUT,
          absl::StrCat(log_name_, " did not form within ", options().limits.form_timeout_ms,
                       " ms: ", joined_, " of ", world_size_, " workers joined (missing ranks: ",
                       missing, ")"),
          "start every worker within --form-timeout-ms of the first, or raise it"));
    });
  }
  host_.sessions.ReadNext(session);  // notices a worker that leaves, or misbehaves, meanwhile
  if (joined_ == world_size_) Start();
}

void Job::OnGoodbye(const SessionPtr& session) {
  // Nothing may follow a Goodbye: the session ends here, whether or not the peer closes (one
  // that stays silent must not hold the job).
  session->state = SessionState::kLeaving;
  left_cleanly_[session->rank] = true;
}

void Job::MemberGone(const SessionPtr& session, SessionState was, const Status& why) {
  const auto rank = static_cast<std::uint32_t>(session->rank);
  if (members_[rank] != session) return;  // replaced by its rejoin already
  members_[rank].reset();
  if (was == SessionState::kJoined) {
    spdlog::warn("{}: rank {} left before the job started: {}", log_name_, rank, why.message());
    if (--joined_ == 0 && !running_) End();  // nobody forms it any more: the name is free
    return;
  }
  // In the running job.
  --live_members_;
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
  const std::uint64_t generation = ++deadline_generation_;
  deadline_kind_ = kind;
  deadline_.expires_after(std::chrono::milliseconds(timeout_ms));
  deadline_.async_wait([this, generation, fire = std::move(fire),
                        alive = alive_](const boost::system::error_code& ec) {
    // A wait cancelled, or one that fired just as the job moved on: nothing to do.
    if (!*alive || ec || generation != deadline_generation_) return;
    deadline_kind_ = Deadline::kNone;
    fire();
  });
}

void Job::CancelDeadline() {
  ++deadline_generation_;
  deadline_kind_ = Deadline::kNone;
  deadline_.cancel();
}

// A member said Goodbye: the job cannot take another iteration, so the others must follow
// within --leave-timeout-ms (one that stays connected and silent would hold phubd for good).
// A stalled job's shorter deadline, or this one already running, is left as it is.
void Job::ArmLeaveDeadline(std::int64_t first_to_leave) {
  // A deadline already running that ends the job sooner or differently stays: a stall's, a
  // lost member's rejoin (it stalls the job if nobody comes back), the attach deadline.
  if (stalled_ || deadline_kind_ == Deadline::kLeaving || deadline_kind_ == Deadline::kStalled ||
      deadline_kind_ == Deadline::kRejoin || deadline_kind_ == Deadline::kAttaching) {
    return;
  }
  ArmDeadline(Deadline::kLeaving, options().limits.leave_timeout_ms, [this, first_to_leave] {
    const proto::Error error = MakeError(
        proto::Error::TIMEOUT,
        absl::StrCat("still in ", log_name_, " ", options().limits.leave_timeout_ms,
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

void Job::Start() {
  CancelDeadline();
  const proto::Hello& hello = members_[0]->hello;
  // Everything a job allocates is bounded by CheckJobLimits and its memory charge; a failed
  // allocation is still the job's refusal (RESOURCE_EXHAUSTED), never the daemon's end.
  StatusOr<keys::KeyTable> table = absl::UnknownError("not built");
  std::vector<float> initial_weights;
  const std::shared_ptr<const JobSnapshot> resume = host_.resume.snapshot;
  try {
    table = keys::KeyTable::Build(TensorsOf(hello), options().chunk_bytes,
                                  static_cast<std::uint32_t>(host_.cores.size()));
    if (table.ok() && !options().initial_weights_path.empty() && !resume) {
      auto weights = LoadInitialWeights(options().initial_weights_path, *table);
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
  const std::size_t chunk_count = table->chunks().size();  // before the table moves
  // Racks of racks: this rack's part sums and relays, checkpoints nothing and resumes nothing
  // (the homes' parts do); a home's part divides by every worker of the job.
  const bool relaying = hello.racks() > 1 && hello.rack_workers() == 0;
  const bool checkpointing = !options().checkpoint.dir.empty() && !relaying;
  // CheckHello accepted every member's optimizer, and they agree.
  const kernels::OptimizerConfig optimizer = *JobOptimizer(hello, options());
  kernels::OptimizerConfig shard_optimizer = optimizer;
  if (relaying) shard_optimizer = {.kind = kernels::OptimizerKind::kAverage, .copies = 1};
  if (hello.rack_workers() > 0) {
    // CheckRacks bounded each to its rack's hosts in the topology file.
    std::uint64_t copies = 0;
    for (const auto& member : members_) copies += member->hello.rack_workers();
    shard_optimizer.copies = static_cast<unsigned>(copies);
  }
  // The job's secret on the data plane: only its members learn it (Welcome).
  const std::uint64_t session =
      std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
  std::shared_ptr<Uplink> uplink;
  try {
    if (relaying) uplink = MakeUplink(hello, *table, optimizer, session);
  } catch (const std::bad_alloc&) {
    return FailForming(MakeError(proto::Error::RESOURCE_EXHAUSTED,
                                 "phubd ran out of memory for the job's relay buffers",
                                 "a smaller model, or lower --memory-budget-bytes so such jobs "
                                 "are refused up front"));
  }
  auto job = std::make_shared<JobSpec>(JobSpec{
      .name = name_,
      .table = std::move(*table),
      .world_size = world_size_,
      .optimizer = shard_optimizer,
      .session = session,
      .send_window_bytes = options().send_window_bytes,
      .wire = *JobWireFormat(hello),  // CheckHello: valid, equal on every rank
      .wire_weights =
          hello.wire_weights() && *JobWireFormat(hello) != kernels::WireFormat::kFp32,
      .initial_weights = std::move(initial_weights),
      // A resumed checkpoint may hold previous weights, which the resumed workers need.
      .keep_previous = !relaying && (options().limits.rejoin_timeout_ms > 0 || checkpointing ||
                                     resume != nullptr),
      .checkpoint_every = checkpointing ? options().checkpoint.every : 0,
      .snapshot_buffers = !checkpointing || options().checkpoint.every == 0
                              ? nullptr
                              : std::make_shared<SnapshotBuffers>(chunk_count),
      .resume = relaying ? nullptr : resume,
      .resume_iteration = resume && !relaying ? host_.resume.iteration : 0,
      .relay = uplink,
      .weights_from_upstream = relaying && hello.rack() != 0});
  std::shared_ptr<const JobSpec> spec = job;
  auto sink = [io = &host_.io, weak = weak_from_this()](ShardEvent event) {
    asio::post(*io, [weak, event = std::move(event)] {
      if (auto self = weak.lock(); self && !self->ended_) self->OnShardEvent(event);
    });
  };
  for (auto& core : host_.cores) {
    if (Status s = core->InstallShard(spec, sink, weight_); !s.ok()) {
      for (auto& installed : host_.cores) installed->RemoveShard(spec->session);
      const bool memory = absl::IsResourceExhausted(s);
      return FailForming(MakeError(
          memory ? proto::Error::RESOURCE_EXHAUSTED : proto::Error::BAD_REQUEST,
          std::string(s.message()),
          memory ? "a smaller model, or lower --memory-budget-bytes (or --max-model-bytes) so such "
                   "jobs are refused up front"
                 : "see phubd's log; on verbs check the memlock limit (ulimit -l)"));
    }
  }
  if (checkpointing) {
    checkpoints_ = MakeCheckpointWriter();
    if (!checkpoints_) {
      for (auto& core : host_.cores) core->RemoveShard(spec->session);
      return FailForming(MakeError(proto::Error::BAD_REQUEST,
                                   absl::StrCat("cannot create ", log_name_,
                                                "'s checkpoint directory under ",
                                                options().checkpoint.dir),
                                   "give phubd a writable --checkpoint-dir"));
    }
  }

  // The shards copied what they resume from; the loaded checkpoint need not outlive that.
  job->resume.reset();
  spec_ = spec;
  uplink_ = uplink;
  if (uplink_) uplink_->Start();
  job_hello_ = hello;
  running_ = true;
  started_ = true;
  stalled_ = false;
  cores_attached_ = 0;
  live_members_ = world_size_;
  ++host_.counters.formed;
  const bool resumed = resume != nullptr && !relaying;
  if (!relaying) host_.resume = {};  // one job resumes it; the next starts afresh
  for (auto& member : members_) {
    member->state = SessionState::kInJob;
    member->last_heard = std::chrono::steady_clock::now();
    SendWelcome(member, resumed, spec->resume_iteration);
  }
  // A member that took its Welcome but never attaches would hold the job for good.
  ArmDeadline(Deadline::kAttaching, options().limits.attach_timeout_ms, [this] {
    Stall(absl::StrCat("not every worker attached to every core within ",
                       options().limits.attach_timeout_ms, " ms of the job's start (",
                       cores_attached_, " of ", host_.cores.size(),
                       " cores have all their workers; --attach-timeout-ms)"));
  });
  spdlog::info(
      "{} started: {} workers, {} tensors, {} chunks of {} bytes over {} cores, {}, weight "
      "{}{}{}",
      log_name_, world_size_, spec->table.tensors().size(), spec->table.chunks().size(),
      spec->table.chunk_bytes(), host_.cores.size(), kernels::Describe(optimizer), weight_,
      spec->wire == kernels::WireFormat::kFp32
          ? std::string()
          : absl::StrCat(", pushes in ", kernels::WireFormatName(spec->wire),
                         spec->wire_weights ? ", weights too" : ", weights in fp32"),
      resumed ? absl::StrCat(", resumed at iteration ", spec->resume_iteration) : "");
}

std::unique_ptr<CheckpointWriter> Job::MakeCheckpointWriter() {
  // The job named "default" (single-tenant phubd) writes where phubd always did.
  std::filesystem::path dir = options().checkpoint.dir;
  if (name_ != "default") dir /= name_;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    spdlog::error("{}: cannot create checkpoint directory {}: {}", log_name_, dir.string(),
                  ec.message());
    return nullptr;
  }
  return std::make_unique<CheckpointWriter>(
      dir.string(), [io = &host_.io, alive = alive_](std::function<void()> done) {
        asio::post(*io, [alive, done = std::move(done)] {
          if (*alive) done();
        });
      });
}

std::shared_ptr<Uplink> Job::MakeUplink(const proto::Hello& hello, const keys::KeyTable& table,
                                        const kernels::OptimizerConfig& optimizer,
                                        std::uint64_t session) {
  UplinkConfig config{.job = name_,
                      .token = hello.job_token(),
                      .topology = options().topology,
                      .rack = hello.rack(),
                      .rack_workers = world_size_,
                      .optimizer = optimizer,
                      .wire = *JobWireFormat(hello),
                      .wire_weights = hello.wire_weights(),
                      .rdma = options().rdma,
                      .connect_timeout_ms = options().limits.form_timeout_ms};
  // Posted only before the Uplink stops, which the job does before its shards go (the cores
  // are phubd's, they outlive it).
  auto post = [cores = &host_.cores, session](keys::CoreIndex core,
                                              std::function<void(Shard&)> fn) {
    (*cores)[core]->Post(session, std::move(fn));
  };
  auto fail = [io = &host_.io, weak = weak_from_this()](std::string why) {
    asio::post(*io, [weak, why = std::move(why)] {
      if (auto self = weak.lock(); self && !self->ended_) self->Stall(why);
    });
  };
  return std::make_shared<Uplink>(std::move(config), table, std::move(post), std::move(fail));
}

void Job::SendWelcome(const SessionPtr& member, bool resumed, std::uint64_t resume_iteration) {
  proto::ControlMessage message;
  proto::Welcome& welcome = *message.mutable_welcome();
  welcome.set_protocol_version(kProtocolVersion);
  welcome.set_chunk_bytes(spec_->table.chunk_bytes());
  for (auto owner : spec_->table.owners()) welcome.add_chunk_owner(owner);
  welcome.set_session(spec_->session);
  welcome.set_weights_from_server(!spec_->initial_weights.empty() ||
                                  spec_->weights_from_upstream);
  // A rack's part sums without stepping; its workers are told the job's optimizer, which the
  // chunks' homes run.
  welcome.set_optimizer(kernels::Describe(spec_->relay ? *JobOptimizer(job_hello_, options())
                                                       : spec_->optimizer));
  welcome.set_wire(kernels::WireFormatName(spec_->wire));
  welcome.set_wire_weights(spec_->wire_weights);
  welcome.set_transport(transport::TransportName(options().transport));
  welcome.set_resumed(resumed);
  welcome.set_resume_iteration(resume_iteration);
  welcome.set_liveness_timeout_ms(
      static_cast<std::uint32_t>(std::max(0, options().limits.liveness_timeout_ms)));
  // A core listening on its own NIC is reached at that NIC's address; one listening on every
  // address, at the address the worker reached the control port on.
  boost::system::error_code ec;
  const std::string control_host = member->socket.local_endpoint(ec).address().to_string();
  for (auto& core : host_.cores) {
    proto::CoreEndpoint& endpoint = *welcome.add_cores();
    endpoint.set_server(0);
    endpoint.set_core(core->index());
    const auto address = boost::asio::ip::make_address(core->address(), ec);
    endpoint.set_host(ec || address.is_unspecified() ? control_host : core->address());
    endpoint.set_port(core->port());
    endpoint.set_nic(core->nic());
  }
  Send(member, message);
}

void Job::OnShardEvent(const ShardEvent& event) {
  if (!running_) return;
  if (event.kind == ShardEvent::Kind::kSnapshot) return OnSnapshot(event);
  if (event.kind == ShardEvent::Kind::kAllAttached) {
    if (++cores_attached_ < host_.cores.size()) return;
    if (deadline_kind_ == Deadline::kAttaching) CancelDeadline();
    if (deadline_kind_ == Deadline::kRejoin && missing_count_ == 0) {
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
  if (left_cleanly_[event.rank]) return;  // its data connections close after its Goodbye
  // A connection of the rank's earlier life, closed before phubd forgot it but handled after:
  // not the rejoined worker's.
  if (event.epoch != forgets_[event.rank]) return;
  const std::string why =
      absl::StrCat("core ", event.core, " lost its data connection: ", event.reason);
  // The worker cannot go on without it: its session ends too, and the job waits for a rejoin
  // (MemberLost). One already gone was handled when it went.
  if (const SessionPtr member = members_[event.rank]) {
    return Refuse(member, MakeError(proto::Error::CONNECTION_LOST, why,
                                    "restart the worker with the same rank: it rejoins the job"));
  }
  if (!missing_[event.rank]) Stall(absl::StrCat("rank ", event.rank, ": ", why));
}

void Job::Stall(const std::string& reason) {
  if (stalled_) return;
  stalled_ = true;
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
  ArmDeadline(Deadline::kStalled, options().limits.stalled_job_timeout_ms, [this] {
    auto members = members_;
    for (auto& member : members) {
      if (!member) continue;
      host_.sessions.Drop(member, absl::DeadlineExceededError(absl::StrCat(
                                      "still connected ", options().limits.stalled_job_timeout_ms,
                                      " ms after the job stalled (--stalled-job-timeout-ms)")));
    }
  });
}

void Job::EndIfRunning() {
  if (!ended_) End();
}

void Job::End() {
  if (ended_) return;
  ended_ = true;
  CancelDeadline();
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
  gathering_.reset();
  auto members = members_;
  for (auto& member : members_) member.reset();
  for (auto& member : members) {
    if (member) member->job.reset();
  }
  if (host_.on_end) host_.on_end(*this);
}

}  // namespace phub::server
