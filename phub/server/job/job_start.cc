// A job's start, once every member has said Hello (Job::Start), as a sequence of steps: the key
// table (and the --init-weights file), the optimizer its shards run for its racks role, the
// session secret, the relay of a rack's part, the JobSpec, the shards installed on every core
// (all or none), the checkpoint writer, then the running state, the Welcomes and the attach
// deadline. A step that fails refuses every member (FailForming) and leaves nothing installed:
// everything a job allocates is bounded by CheckJobLimits and its memory charge, and a failed
// allocation is still the job's refusal (RESOURCE_EXHAUSTED), never the daemon's end. The
// install, the one step that takes time, runs off the control plane's thread (job_install.cc).
#include <boost/asio/post.hpp>
#include <new>
#include <optional>
#include <random>

#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"
#include "phub/common/version.h"
#include "phub/server/admission/job_tokens.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/checkpoint/snapshot_buffers.h"
#include "phub/server/job/initial_weights.h"
#include "phub/server/job/job.h"
#include "phub/server/job/job_start_plan.h"
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

// Only the job's members learn it (Welcome).
std::uint64_t NewSessionSecret() {
  return std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32);
}

}  // namespace

void Job::Start() {
  CancelDeadline();
  if (elastic_.enabled) {
    // Ranks 0..start-1 start it (ReadyToStart); any other that said Hello joins at once.
    elastic_.members.clear();
    for (std::uint32_t r = 0; r < elastic_.start; ++r) elastic_.members.push_back(r);
  }
  if (auto refusal = host_.reserve(*this)) return FailForming(*refusal);
  const proto::Hello& hello = members_[0]->hello;
  const bool steps = !role_.relays_upstream();  // a rack's part sums; the homes step
  auto plan = std::make_unique<StartPlan>(
      StartPlan{.resume = steps ? host_.resume.snapshot : nullptr,
                .optimizer = *JobOptimizer(hello, host_.admission.optimizer),
                .session = NewSessionSecret(),
                .checkpointing = steps && !options().checkpoint.dir.empty(),
                .hello = hello});
  if (auto refusal = BuildKeyTable(hello, *plan)) return FailForming(*refusal);
  if (auto refusal = MakeRelay(hello, *plan)) return FailForming(*refusal);
  plan->spec = MakeSpec(hello, *plan);
  InstallShards(std::move(plan));
}

std::optional<proto::Error> Job::BuildKeyTable(const proto::Hello& hello, StartPlan& plan) const {
  StatusOr<keys::KeyTable> table = absl::UnknownError("not built");
  try {
    table = keys::KeyTable::Build(TensorsOf(hello), role_.ChunkBytes(host_.admission.chunk_bytes),
                                  static_cast<std::uint32_t>(host_.cores.size()));
    if (table.ok() && !options().initial_weights_path.empty() && !host_.resume.snapshot) {
      auto weights = LoadInitialWeights(options().initial_weights_path, *table);
      if (!weights.ok()) {
        return MakeError(proto::Error::BAD_INITIAL_WEIGHTS, std::string(weights.status().message()),
                         "give phubd an --init-weights file made for this model");
      }
      plan.initial_weights = std::move(*weights);
    }
  } catch (const std::bad_alloc&) {
    return MakeError(proto::Error::RESOURCE_EXHAUSTED,
                     "phubd ran out of memory building the job's key table",
                     "a smaller model or fewer chunks (a larger --chunk-bytes); "
                     "lower --max-model-bytes so such jobs are refused up front");
  }
  if (!table.ok()) {
    return MakeError(proto::Error::BAD_REQUEST, std::string(table.status().message()),
                     "fix phubd's --chunk-bytes or the model");
  }
  if (auto refusal = CheckHomeChunks(*table)) return refusal;
  if (plan.resume && plan.resume->chunk_bytes != table->chunk_bytes()) {
    // --resume took chunks of the flag's size or a home's (its count elements more): this
    // part's must be the checkpoint's.
    return MakeError(proto::Error::BAD_REQUEST,
                     absl::StrCat(log_name_, " cuts its chunks in ", table->chunk_bytes(),
                                  " bytes; the checkpoint phubd resumes cut them in ",
                                  plan.resume->chunk_bytes,
                                  role_.home_part() ? " (an earlier release's home part, or not "
                                                      "a home part's checkpoint)"
                                                    : " (a home part's checkpoint)"),
                     "resume each part from its own checkpoint folder, written by this release");
  }
  plan.table = std::move(*table);
  return std::nullopt;
}

std::optional<proto::Error> Job::CheckHomeChunks(const keys::KeyTable& table) const {
  if (!role_.home_part()) return std::nullopt;
  // Each of a home's tensors is a rack's chunk and its counts (copy_count.h): cut in two, one
  // part would step without the counts it needs.
  for (std::uint32_t t = 0; t < table.tensors().size(); ++t) {
    const keys::TensorSpec& tensor = table.tensors()[t];
    if (tensor.elements > kCountElements && table.chunks_of_tensor(t).size() == 1) continue;
    return MakeError(
        proto::Error::BAD_REQUEST,
        absl::StrCat(log_name_, ": the racks' chunk '", Bounded(tensor.name, 64), "' of ",
                     tensor.elements, " elements (with its counts) ",
                     tensor.elements <= kCountElements ? "holds no weight"
                                         : absl::StrCat("does not fit one chunk of ",
                                                        table.chunk_bytes(), " bytes here")),
        "give every rack's phubd the same --chunk-bytes");
  }
  return std::nullopt;
}

kernels::OptimizerConfig Job::ShardOptimizer(const kernels::OptimizerConfig& job_optimizer) const {
  // A rack's part sums its rack's copies without stepping: the chunks' homes step.
  if (role_.relays_upstream()) return {.kind = kernels::OptimizerKind::kAverage, .copies = 1};
  kernels::OptimizerConfig config = job_optimizer;
  if (role_.home_part()) {
    // A home's part divides each iteration by the copies its members' sums count
    // (JobSpec::most_copies, Shard::CountedCopies); this, every worker the job may have, is
    // what they count in a job of fixed racks (CheckRacks bounded each rack's to its hosts in
    // the topology file).
    std::uint64_t copies = 0;
    for (const auto& member : members_) {
      copies += JobRole::Of(member->hello).copies_per_member();
    }
    config.copies = static_cast<unsigned>(copies);
  }
  return config;
}

kernels::LrScaling Job::LrScalingOf(const proto::Hello& hello) const {
  // A rack's part sums without stepping: the homes scale the lr, by every rack's members.
  if (role_.relays_upstream()) return kernels::LrScaling::kFixed;
  return static_cast<kernels::LrScaling>(hello.lr_scaling());  // CheckHello: every rank's
}

std::uint32_t Job::LrStartMembers() const {
  if (!role_.home_part()) return elastic_.start;
  // The racks' start sizes (CheckRacks: each 1..its rack_workers): the lr given is the lr of
  // the job as it starts.
  std::uint32_t start = 0;
  for (const auto& member : members_) {
    if (member) start += member->hello.rack_start_workers();
  }
  return start;
}

std::vector<std::uint32_t> Job::MostCopies() const {
  if (!role_.home_part()) return {};
  // By rank (= rack): CheckRacks bounded each to its rack's hosts in the topology file.
  std::vector<std::uint32_t> most(world_size_, 0);
  for (const auto& member : members_) {
    if (member) most[member->hello.rank()] = JobRole::Of(member->hello).copies_per_member();
  }
  return most;
}

// Racks of racks (uplink.h): a rack's part passes each chunk's sum to its home PBox.
std::optional<proto::Error> Job::MakeRelay(const proto::Hello& hello, StartPlan& plan) {
  if (!role_.relays_upstream()) return std::nullopt;
  // The workers proved they hold the job's token; the homes ask this PBox for the same proof.
  StatusOr<std::string> token = ExpectedToken(host_.admission.sharing, name_);
  if (!token.ok()) {
    return MakeError(proto::Error::BAD_TOKEN,
                     absl::StrCat(log_name_, ": its token is gone from this PBox (",
                                  token.status().message(), ")"),
                     "the operator restores the job's token file; then start the job again");
  }
  UplinkConfig config{.job = name_,
                      .token = *std::move(token),
                      .topology = host_.admission.racks.topology,
                      .rack = role_.rack(),
                      .rack_workers = world_size_,
                      // A fixed rack starts, and stays, with all its workers.
                      .rack_start = elastic_.enabled ? elastic_.start : world_size_,
                      .lr_scaling = static_cast<kernels::LrScaling>(hello.lr_scaling()),
                      .optimizer = plan.optimizer,
                      .wire = {.format = *JobWireFormat(hello),
                               .weights = hello.wire_weights()},
                      .rdma = host_.data_plane.rdma,
                      .connect_timeout_ms = deadlines().form_timeout_ms};
  // Posted only before the Uplink stops, which the job does before its shards go (the cores
  // are phubd's, they outlive it).
  auto post = [cores = &host_.cores, session = plan.session](keys::CoreIndex core,
                                                             std::function<void(Shard&)> fn) {
    (*cores)[core]->Post(session, std::move(fn));
  };
  auto fail = [io = &host_.io, weak = weak_from_this()](std::string why) {
    asio::post(*io, [weak, why = std::move(why)] {
      if (auto self = weak.lock(); self && !self->ended_) self->Stall(why);
    });
  };
  try {
    plan.uplink = std::make_shared<Uplink>(std::move(config), *plan.table, std::move(post),
                                           std::move(fail));
  } catch (const std::bad_alloc&) {
    return MakeError(proto::Error::RESOURCE_EXHAUSTED,
                     "phubd ran out of memory for the job's relay buffers",
                     "a smaller model, or lower --memory-budget-bytes so such jobs are refused "
                     "up front");
  }
  return std::nullopt;
}

std::shared_ptr<JobSpec> Job::MakeSpec(const proto::Hello& hello, StartPlan& plan) const {
  const std::size_t chunk_count = plan.table->chunks().size();  // before the table moves
  const kernels::WireFormat wire = *JobWireFormat(hello);  // CheckHello: valid, equal on every rank
  const CheckpointOptions& checkpoint = options().checkpoint;
  return std::make_shared<JobSpec>(JobSpec{
      .name = name_,
      .table = std::move(*plan.table),
      .world_size = world_size_,
      .optimizer = ShardOptimizer(plan.optimizer),
      .per_iteration_values = hello.per_iteration_values(),  // CheckHello: not for a relay
      .session = plan.session,
      .send_window_bytes = host_.data_plane.send_window_bytes,
      .wire = {.format = wire, .weights = hello.wire_weights() && wire != kernels::WireFormat::kFp32},
      .initial_weights = std::move(plan.initial_weights),
      // A resumed checkpoint may hold previous weights, which the resumed workers need.
      .keep_previous = !role_.relays_upstream() && (deadlines().rejoin_timeout_ms > 0 ||
                                                    plan.checkpointing || plan.resume != nullptr),
      .checkpoint_every = plan.checkpointing ? checkpoint.every : 0,
      .snapshot_buffers = !plan.checkpointing || checkpoint.every == 0
                              ? nullptr
                              : std::make_shared<SnapshotBuffers>(chunk_count),
      .resume = plan.resume,
      .resume_iteration = plan.resume ? host_.resume.iteration : 0,
      .relay = plan.uplink,
      .weights_from_upstream = role_.weights_from_upstream(),
      .most_copies = MostCopies(),
      .traffic = std::make_shared<JobTraffic>(host_.cores.size()),
      .elastic = elastic_.enabled,
      .initial_members = elastic_.enabled ? elastic_.members : std::vector<std::uint32_t>{},
      .lr_scaling = LrScalingOf(hello),
      .lr_start_members = LrStartMembers(),
      .batches_before = plan.resume && plan.resume->batches_before ? *plan.resume->batches_before
                                                                   : 0});
}

std::optional<proto::Error> Job::OpenCheckpoints(const StartPlan& plan) {
  if (!plan.checkpointing) return std::nullopt;
  checkpoints_ = MakeCheckpointWriter();
  if (checkpoints_) return std::nullopt;
  for (auto& core : host_.cores) core->RemoveShard(plan.spec->session);
  return MakeError(proto::Error::BAD_REQUEST,
                   absl::StrCat("cannot create ", log_name_, "'s checkpoint directory under ",
                                options().checkpoint.dir),
                   "give phubd a writable --checkpoint-dir");
}

void Job::Run(StartPlan& plan, const proto::Hello& hello) {
  // The shards copied what they resume from; the loaded checkpoint need not outlive that.
  plan.spec->resume.reset();
  spec_ = plan.spec;
  progress_.Start(spec_->traffic, spec_->table.chunks().size(), spec_->resume_iteration,
                  std::chrono::steady_clock::now());
  uplink_ = plan.uplink;
  if (uplink_) uplink_->Start();
  job_hello_ = hello;
  running_ = true;
  started_ = true;
  stalled_ = false;
  cores_attached_ = 0;
  live_members_ = 0;
  for (const auto& member : members_) live_members_ += member ? 1 : 0;
  ++host_.counters.formed;
  const bool resumed = plan.resume != nullptr;
  if (spec_->per_iteration_values) {
    // A checkpoint holds the values its iteration stepped with (SnapshotHeader).
    values_.emplace(spec_->optimizer.kind, world_size_, spec_->resume_iteration,
                    resumed ? std::optional(kernels::ValuesOf(plan.resume->optimizer))
                            : std::nullopt);
  }
  if (!role_.relays_upstream()) host_.resume = {};  // one job resumes it; the next starts afresh
  if (elastic_.enabled) {
    elastic_.schedule.Reset(spec_->resume_iteration + 1, elastic_.members, spec_->batches_before);
    if (resumed && !plan.resume->batches_before) {
      spdlog::warn("{}: its checkpoint (format 1) does not say how many batches the job took: "
                   "its workers' data starts from the first batch again", log_name_);
    }
    if (values_) {
      // An iteration's values are its members' (a change decided before anybody gave any).
      values_->MakeElastic(
          [this](std::uint32_t rank, std::uint64_t iteration) {
            const MemberSchedule::Entry* entry = elastic_.schedule.At(iteration);
            // Before the oldest entry kept (never asked: pending iterations are past it): wait.
            return entry == nullptr ||
                   std::binary_search(entry->ranks.begin(), entry->ranks.end(), rank);
          },
          elastic_.members);
    }
  }
  for (std::uint32_t rank = 0; rank < world_size_; ++rank) {
    const SessionPtr& member = members_[rank];
    if (!member) continue;
    member->state = SessionState::kInJob;
    member->last_heard = std::chrono::steady_clock::now();
    if (elastic_.enabled && !std::binary_search(elastic_.members.begin(), elastic_.members.end(),
                                                rank)) {
      // Said Hello while the job formed, beyond the workers it starts with: it joins.
      elastic_.joiners.push_back(rank);
      elastic_.joiners_attached = false;
      for (auto& core : host_.cores) {
        core->RunOnShard(spec_->session, [rank](Shard& shard) { shard.ExpectJoin(rank); });
      }
    }
    SendWelcome(member, resumed, spec_->resume_iteration);
  }
  // A member that took its Welcome but never attaches would hold the job for good.
  ArmDeadline(Deadline::kAttaching, deadlines().attach_timeout_ms, [this] {
    Stall(absl::StrCat("not every worker attached to every core within ",
                       deadlines().attach_timeout_ms, " ms of the job's start (",
                       cores_attached_, " of ", host_.cores.size(),
                       " cores have all their workers; --attach-timeout-ms)"));
  });
  spdlog::info(
      "{} started: {} workers{}, {} tensors, {} chunks of {} bytes over {} cores, {}, weight "
      "{}{}{}",
      log_name_, elastic_.enabled ? elastic_.members.size() : world_size_,
      elastic_.enabled ? absl::StrCat(" (elastic: ", elastic_.min, " to ", world_size_, ")") : "",
      spec_->table.tensors().size(), spec_->table.chunks().size(),
      spec_->table.chunk_bytes(), host_.cores.size(), kernels::Describe(plan.optimizer), weight_,
      spec_->wire.format == kernels::WireFormat::kFp32
          ? std::string()
          : absl::StrCat(", pushes in ", kernels::WireFormatName(spec_->wire.format),
                         spec_->wire.weights ? ", weights too" : ", weights in fp32"),
      resumed ? absl::StrCat(", resumed at iteration ", spec_->resume_iteration) : "");
}

}  // namespace phub::server
