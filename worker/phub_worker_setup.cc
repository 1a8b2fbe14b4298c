#include "worker/phub_worker_setup.h"

#include <cstdlib>

#include "phub/common/token_file.h"
#include "phub/exchange/make_exchange.h"
#include "worker/backend/onednn/onednn_backend.h"
#include "worker/train/launch_env.h"
#include "spdlog/spdlog.h"
#include "worker/train/synthetic_data.h"
#ifdef PHUB_HAVE_CUDNN
#include "worker/backend/cudnn/cudnn_backend.h"
#endif

namespace phub::worker {
namespace {

using Flags = WorkerFlags;

// The job's name as the launcher knows it (PHUB_JOB, torchrun's run id, Slurm's job id), or ""
// (phubd's job "default") when none does: the same order as the Python package's.
std::string DefaultJobName() {
  for (const char* name : {"PHUB_JOB", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0' && std::string(value) != "none") return value;
  }
  return "";
}

}  // namespace

phub::StatusOr<std::unique_ptr<phub::worker::Backend>> MakeBackend(const std::string& device,
                                                                    bool tf32) {
  if (device == "cuda") {
#ifdef PHUB_HAVE_CUDNN
    return phub::worker::MakeCudnnBackend({.device = 0, .allow_tf32 = tf32});
#else
    (void)tf32;
    return absl::InvalidArgumentError(
        "--device cuda: this phub-worker was built without CUDA/cuDNN; "
        "rebuild where /usr/local/cuda has them (PHUB_WITH_CUDA=ON), or use --device cpu");
#endif
  }
  return phub::worker::MakeOnednnBackend();
}

phub::StatusOr<phub::Membership> DecideMembership(const Flags& f) {
  std::optional<std::uint32_t> rank = f.rank, world = f.world;
  if (!f.topology.empty() && !rank && !world) {
    PHUB_ASSIGN_OR_RETURN(auto topology, phub::topology::Topology::Load(f.topology));
    PHUB_ASSIGN_OR_RETURN(auto placement, topology.Locate(f.hostname));
    rank = placement.rank;
    world = placement.world_size;
  }
  // An elastic job's world is its most members: --rank alone is enough.
  if (rank && !world && f.min_workers > 0 && f.max_workers > 0) world = f.max_workers;
  phub::Membership me;
  if (rank || world) {
    if (!rank || !world) {
      return absl::InvalidArgumentError("give both --rank and --world, or neither");
    }
    me = {*rank, *world};
  } else {
    PHUB_ASSIGN_OR_RETURN(auto env, phub::worker::RankFromEnvironment());
    if (env) {
      me = {env->rank, env->world};
      spdlog::info("rank {} of {} from {}", me.rank, me.world_size, env->source);
    }
  }
  // Across racks a fixed rack gives the job's --lr-scaling too (the lr follows every rack's
  // members; MakeTrainer checks that the file has more than one rack).
  if (f.lr_scaling != "none" && f.min_workers == 0 && f.topology.empty()) {
    return absl::InvalidArgumentError("--lr-scaling " + f.lr_scaling +
                                      ": only an elastic job's member count changes; give "
                                      "--min-workers and --max-workers (or, across racks, "
                                      "--topology), or no --lr-scaling");
  }
  if (f.min_workers > 0 || f.max_workers > 0 || f.start_workers > 0) {
    // An elastic job: its world size is its most members; a rank beyond the launcher's world
    // (a worker added later) is fine, phubd gives it a free one.
    if (f.min_workers == 0) {
      return absl::InvalidArgumentError("--max-workers/--start-workers need --min-workers");
    }
    const std::uint32_t max = f.max_workers > 0 ? f.max_workers : me.world_size;
    if (f.comm != "ps") {
      return absl::InvalidArgumentError("--min-workers: an elastic job needs --comm ps (phubd "
                                        "keeps the weights while members come and go)");
    }
    if (max < f.min_workers) {
      return absl::InvalidArgumentError("--max-workers " + std::to_string(max) +
                                        " is below --min-workers " +
                                        std::to_string(f.min_workers));
    }
    me.world_size = max;
    if (me.rank >= max) me.rank = 0;  // asks for a slot; phubd gives a free one
  }
  if (me.world_size < 1 || me.rank >= me.world_size) {
    return absl::InvalidArgumentError("--rank " + std::to_string(me.rank) +
                                      " must be below --world " + std::to_string(me.world_size));
  }
  return me;
}

phub::StatusOr<std::unique_ptr<phub::worker::Trainer>> MakeTrainer(
    const Flags& f, phub::Membership me, phub::worker::Model& model,
    phub::worker::Backend& backend,
    std::optional<std::chrono::steady_clock::time_point> deadline) {
  if (f.comm == "none") return phub::worker::Trainer::Local(model, backend, f.optimizer);
  phub::exchange::ExchangeOptions o = f.exchange;
  PHUB_ASSIGN_OR_RETURN(o.kind, phub::exchange::ParseExchangeKind(f.comm));
  o.membership = me;
  for (const std::string& s : f.ps) {
    PHUB_ASSIGN_OR_RETURN(auto endpoint, phub::exchange::ParseEndpoint(s));
    o.ps.servers.push_back(endpoint);
  }
  if (!f.topology.empty()) {
    // Racks of racks: rank, world and phubd (the rack's PBox) are the file's.
    if (!f.ps.empty()) return absl::InvalidArgumentError("give --topology or --ps, not both");
    PHUB_ASSIGN_OR_RETURN(auto topology, phub::topology::Topology::Load(f.topology));
    PHUB_RETURN_IF_ERROR(phub::exchange::PlaceInRacks(topology, f.hostname, o));
    if (o.membership != me) {
      return absl::InvalidArgumentError(
          "rank " + std::to_string(me.rank) + " of " + std::to_string(me.world_size) +
          ", but " + f.topology + " puts host '" + f.hostname + "' at rank " +
          std::to_string(o.membership.rank) + " of " + std::to_string(o.membership.world_size) +
          ": give no --rank/--world with --topology");
    }
    if ((!o.rack || o.rack->racks <= 1) && f.min_workers == 0 && f.lr_scaling != "none") {
      return absl::InvalidArgumentError(
          "--lr-scaling " + f.lr_scaling + " in a fixed job: " + f.topology +
          " has one rack, whose member count never changes; give --min-workers and "
          "--max-workers, or no --lr-scaling");
    }
  }
  if (!f.token_file.empty()) {
    PHUB_ASSIGN_OR_RETURN(o.ps.client.job_token, phub::ReadTokenFile(f.token_file));
  }
  o.ps.client.job = f.job.empty() ? DefaultJobName() : f.job;
  // A worker that comes back (a restart, or phubd restarted with --resume) keeps trying this long.
  if (f.reconnect_timeout_ms > 0) o.ps.client.connect_timeout_ms = f.reconnect_timeout_ms;
  o.ps.client.hello_answer_timeout_ms = f.hello_answer_timeout_ms;
  o.ps.client.deadline = deadline;
  o.ps.client.socket_buffer_bytes = f.socket_buffer_bytes;
  o.ps.client.min_workers = f.min_workers;
  o.ps.client.start_workers = f.start_workers;
  PHUB_ASSIGN_OR_RETURN(o.ps.client.lr_scaling, phub::kernels::ParseLrScaling(f.lr_scaling));
  if (f.optimizer_given) o.ps.client.optimizer = f.optimizer;
  if (f.lr_schedule.Varies()) {
    // phubd steps each iteration with the values the workers send (the schedule's), for the
    // optimizer they name: with a schedule, the workers' optimizer flags are the job's.
    if (o.rack && o.rack->racks > 1) {
      return absl::InvalidArgumentError(
          "--lr-schedule/--warmup-iters with --topology of " + std::to_string(o.rack->racks) +
          " racks: a rack's PBox passes sums on and the home PBoxes step with fixed values; "
          "use a constant --lr without --warmup-iters across racks, or one rack");
    }
    o.ps.client.per_iteration_values = true;
    o.ps.client.optimizer = f.optimizer;
  }
  o.ring.ring.rendezvous = f.rendezvous;
  o.ring.ring.listen_host = f.listen_host;
  o.ring.optimizer = f.optimizer;
  // GPU 0, as the cudnn backend: one worker per GPU is placed with CUDA_VISIBLE_DEVICES.
  o.nccl.device = 0;
  o.nccl.rendezvous = f.rendezvous;
  o.nccl.optimizer = f.optimizer;
  return phub::worker::Trainer::WithExchange(
      model, backend,
      [&](std::vector<phub::keys::TensorSpec> tensors,
          std::shared_ptr<phub::staging::CopyEngine> engine, std::vector<std::span<float>> grads,
          std::vector<std::span<float>> weights) {
        return phub::exchange::MakeDeviceExchange(o, std::move(engine), std::move(tensors),
                                                  std::move(grads), std::move(weights));
      },
      !f.no_overlap);
}

Status WarmUpBeforeJoining(const WorkerFlags& f, Model& model, Backend& backend) {
  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> warm,
                        Trainer::Local(model, backend,
                                       {.kind = kernels::OptimizerKind::kSgd, .lr = 1e-12f}));
  PHUB_ASSIGN_OR_RETURN(Batch batch, MakeSyntheticBatch(model));
  FillSynthetic(model, batch, f.seed);
  Tensor on_device;
  if (backend.device() != Device::kCpu) {
    PHUB_ASSIGN_OR_RETURN(on_device, backend.Allocate(model.input_shape()));
    PHUB_RETURN_IF_ERROR(backend.CopyFromHost(batch.x, on_device));
  }
  PHUB_RETURN_IF_ERROR(warm->Step(on_device.defined() ? on_device : batch.x, batch.labels).status());
  return warm->Finish();
}

}  // namespace phub::worker
