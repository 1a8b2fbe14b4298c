// The job's lifecycle, on the control plane's thread: the shards installed once every worker
// has said Hello, the Welcome, the phase deadlines (forming, attaching, leaving, stalled), and
// the end of the job. Sessions and their messages are in control_plane.cc.
#include <boost/asio/post.hpp>
#include <new>
#include <random>

#include "absl/strings/str_cat.h"
#include "phub/common/version.h"
#include "phub/server/control_plane.h"
#include "phub/server/hello_check.h"
#include "phub/server/initial_weights.h"
#include "phub/server/job_limits.h"
#include "phub/server/snapshot_buffers.h"
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
  const std::size_t chunk_count = table->chunks().size();  // before the table moves
  // CheckHello accepted every member's optimizer, and they agree.
  const kernels::OptimizerConfig optimizer = *JobOptimizer(members_[0]->hello, options_);
  auto job = std::make_shared<JobSpec>(JobSpec{
      .table = std::move(*table),
      .world_size = options_.world_size,
      .optimizer = optimizer,
      .session = std::random_device{}() | (std::uint64_t{std::random_device{}()} << 32),
      .send_window_bytes = options_.send_window_bytes,
      .wire = *JobWireFormat(members_[0]->hello),  // CheckHello: valid, equal on every rank
      .wire_weights = members_[0]->hello.wire_weights() &&
                      *JobWireFormat(members_[0]->hello) != kernels::WireFormat::kFp32,
      .initial_weights = resume_ ? std::vector<float>{} : std::move(initial_weights),
      // A resumed checkpoint may hold previous weights, which the resumed workers need.
      .keep_previous = options_.limits.rejoin_timeout_ms > 0 ||
                       !options_.checkpoint.dir.empty() || resume_ != nullptr,
      .checkpoint_every = options_.checkpoint.dir.empty() ? 0 : options_.checkpoint.every,
      .snapshot_buffers = options_.checkpoint.dir.empty() || options_.checkpoint.every == 0
                              ? nullptr
                              : std::make_shared<SnapshotBuffers>(chunk_count),
      .resume = resume_,
      .resume_iteration = resume_ ? resume_iteration_ : 0});
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

  // The shards copied what they resume from; the loaded checkpoint need not outlive that.
  job->resume.reset();
  spec_ = spec;
  job_hello_ = members_[0]->hello;
  running_ = true;
  stalled_ = false;
  cores_attached_ = 0;
  live_members_ = options_.world_size;
  left_cleanly_.assign(options_.world_size, false);
  missing_.assign(options_.world_size, 0);
  missing_count_ = 0;
  forgets_.assign(options_.world_size, 0);
  gathering_iteration_ = 0;
  ++jobs_started_;
  const bool resumed = resume_ != nullptr;
  resume_.reset();  // one job resumes it; the next starts afresh
  for (auto& member : members_) {
    member->state = State::kInJob;
    member->last_heard = std::chrono::steady_clock::now();
    SendWelcome(member, resumed, spec->resume_iteration);
  }
  // A member that took its Welcome but never attaches would hold the job (and phubd) for good.
  ArmJobDeadline(JobDeadline::kAttaching, options_.limits.attach_timeout_ms, [this] {
    Stall(absl::StrCat("not every worker attached to every core within ",
                       options_.limits.attach_timeout_ms, " ms of the job's start (",
                       cores_attached_, " of ", cores_.size(),
                       " cores have all their workers; --attach-timeout-ms)"));
  });
  spdlog::info("job {} started: {} workers, {} tensors, {} chunks of {} bytes over {} cores, {}{}{}",
               jobs_started_, options_.world_size, spec->table.tensors().size(),
               spec->table.chunks().size(), spec->table.chunk_bytes(), cores_.size(),
               kernels::Describe(optimizer),
               spec->wire == kernels::WireFormat::kFp32
                   ? std::string()
                   : absl::StrCat(", pushes in ", kernels::WireFormatName(spec->wire),
                                  spec->wire_weights ? ", weights too" : ", weights in fp32"),
               resumed ? absl::StrCat(", resumed at iteration ", spec->resume_iteration) : "");
}

void ControlPlane::SendWelcome(const SessionPtr& member, bool resumed,
                               std::uint64_t resume_iteration) {
  proto::ControlMessage message;
  proto::Welcome& welcome = *message.mutable_welcome();
  welcome.set_protocol_version(kProtocolVersion);
  welcome.set_chunk_bytes(spec_->table.chunk_bytes());
  for (auto owner : spec_->table.owners()) welcome.add_chunk_owner(owner);
  welcome.set_session(spec_->session);
  welcome.set_weights_from_server(!spec_->initial_weights.empty());
  welcome.set_optimizer(kernels::Describe(spec_->optimizer));
  welcome.set_wire(kernels::WireFormatName(spec_->wire));
  welcome.set_wire_weights(spec_->wire_weights);
  welcome.set_transport(transport::TransportName(options_.transport));
  welcome.set_resumed(resumed);
  welcome.set_resume_iteration(resume_iteration);
  welcome.set_liveness_timeout_ms(
      static_cast<std::uint32_t>(std::max(0, options_.limits.liveness_timeout_ms)));
  // Workers reach the data ports at the address they reached the control port on.
  boost::system::error_code ec;
  std::string host = member->socket.local_endpoint(ec).address().to_string();
  for (auto& core : cores_) {
    proto::CoreEndpoint& endpoint = *welcome.add_cores();
    endpoint.set_server(0);
    endpoint.set_core(core->index());
    endpoint.set_host(host);
    endpoint.set_port(core->port());
  }
  Send(member, message);
}

void ControlPlane::OnShardEvent(const ShardEvent& event) {
  if (!running_) return;
  if (event.kind == ShardEvent::Kind::kSnapshot) return OnSnapshot(event);
  if (event.kind == ShardEvent::Kind::kAllAttached) {
    if (++cores_attached_ < cores_.size()) return;
    if (job_deadline_kind_ == JobDeadline::kAttaching) CancelJobDeadline();
    if (job_deadline_kind_ == JobDeadline::kRejoin && missing_count_ == 0) {
      CancelJobDeadline();
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

void ControlPlane::Stall(const std::string& reason) {
  if (stalled_) return;
  stalled_ = true;
  ++stalls_;
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
    total.cpu_seconds += s.cpu_seconds;
  }
  // The cores' CPU per byte received is what sizes a PBox (docs/design.md "Sizing a PBox").
  spdlog::info(
      "job {} ended{}: {} chunk aggregations, {:.1f} MiB in, {:.1f} MiB out, cores' CPU {:.3f} s "
      "({:.3f} ns per byte in)",
      jobs_started_, stalled_ ? " (stalled)" : "", total.aggregations, total.bytes_in / 1048576.0,
      total.bytes_out / 1048576.0, total.cpu_seconds,
      total.bytes_in ? 1e9 * total.cpu_seconds / static_cast<double>(total.bytes_in) : 0.0);
  ++jobs_ended_;
  running_ = false;
  stalled_ = false;
  joined_ = 0;
  missing_.assign(options_.world_size, 0);
  missing_count_ = 0;
  spec_.reset();
  gathering_.reset();
  for (auto& member : members_) member.reset();
  if (on_job_end_) on_job_end_();
}

}  // namespace phub::server
