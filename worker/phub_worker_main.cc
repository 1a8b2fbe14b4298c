// phub-worker: one training process (one per GPU, or per CPU box). Trains a model of the zoo on
// synthetic data or Fashion-MNIST, alone (--comm none: the optimizer runs here) or with other
// workers through a parameter server (--comm ps: phubd applies the optimizer), a ring
// allreduce (--comm ring: every worker applies it) or NCCL (--comm nccl), overlapping each layer's
// exchange with the rest of backward and the next forward (worker/train/trainer.h). Prints a
// progress line per interval, test accuracy per epoch (Fashion-MNIST), a summary, and on request a
// JSON record.
//
// Errors come up as a Status from every layer below (backends, model, loader, trainer, the
// exchange); main logs the message and exits 2 for what the user can fix in the command line,
// the data or the environment (InvalidArgument, NotFound), 1 for anything else (a device, a
// peer, memory).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <numeric>
#include <optional>
#include <vector>

#include "fmt/format.h"
#include "phub/common/logging.h"
#include "phub/common/membership.h"
#include "phub/exchange/make_exchange.h"
#include "worker/data/batch_loader.h"
#include "worker/data/elastic_batches.h"
#include "worker/data/fashion_mnist.h"
#include "worker/nn/models/models.h"
#include "worker/phub_worker_flags.h"
#include "worker/phub_worker_setup.h"
#include "worker/run_results.h"
#include "worker/training_data.h"
#include "worker/train/evaluate.h"
#include "worker/train/reconnect.h"
#include "worker/train/save_weights.h"
#include "worker/train/supervisor.h"
#include "worker/train/synthetic_data.h"
#include "worker/train/trainer.h"

namespace {

using phub::worker::DecideMembership;
using phub::worker::MakeBackend;
using phub::worker::MakeTrainer;
using phub::worker::Tensor;
using Clock = std::chrono::steady_clock;

using Flags = phub::worker::WorkerFlags;

// An elastic job's SIGTERM (a scheduler's preemption): leave at the next iteration boundary.
std::atomic<bool> g_leave_asked{false};
extern "C" void AskToLeave(int) { g_leave_asked = true; }

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}


// The run; Ok when it trained (or described) to the end.
phub::Status Run(Flags& f) {
  PHUB_ASSIGN_OR_RETURN(const phub::Membership me, DecideMembership(f));
  // One command line for every rank (srun, mpirun): "{rank}" in an output path becomes the rank.
  for (std::string* path : {&f.save_weights, &f.results}) {
    for (auto at = path->find("{rank}"); at != std::string::npos; at = path->find("{rank}")) {
      path->replace(at, 6, std::to_string(me.rank));
    }
  }
  if (f.comm == "none" && me.world_size > 1) {
    return absl::InvalidArgumentError(
        "--world " + std::to_string(me.world_size) +
        " with --comm none: choose --comm ps, ring or nccl to train together");
  }

  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<phub::worker::Backend> backend,
                        MakeBackend(f.device, f.tf32));
  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<phub::worker::Model> model,
                        phub::worker::MakeModel(f.model, f.batch));
  PHUB_RETURN_IF_ERROR(model->Build(*backend, f.seed));
  if (f.describe) {
    std::printf("%s", model->Describe().c_str());
    return absl::OkStatus();
  }

  // Data: Fashion-MNIST (a fixed job's shard, or batches by number: training_data.h) or
  // synthetic batches.
  const bool elastic_job = f.min_workers > 0;
  PHUB_ASSIGN_OR_RETURN(phub::worker::TrainingData data,
                        phub::worker::LoadTrainingData(f, me, *model));
  const auto& train = data.train;
  auto& loader = data.loader;
  auto& elastic_batches = data.numbered;
  // Across racks a fixed rack numbers its batches too (its members are 0..n-1): see the loop.
  const bool fixed_numbered = elastic_batches && !elastic_job;
  // The batches of `step` onwards: the very ones an uninterrupted run would have had (batches
  // by number need no seeking).
  auto seek = [&](std::int64_t step) -> phub::Status {
    if (!train || elastic_batches) return absl::OkStatus();
    loader.reset();
    PHUB_ASSIGN_OR_RETURN(loader, phub::worker::data::BatchLoader::Create(
                                      *train, f.batch, me.rank, me.world_size, f.seed, true, step));
    return absl::OkStatus();
  };
  const std::int64_t per_epoch = loader ? loader->batches_per_epoch() : 0;
  // An elastic job's epochs end at a global batch count (whoever the members are); its
  // iterations end there, or at --iters. Across racks every rack must end at the same
  // iteration (each chunk's home waits for every rack's sum): --epochs there is that many
  // rounds of the epoch, the iterations a rack of all its hosts passes its slice in.
  const std::int64_t global_per_epoch = elastic_batches ? elastic_batches->batches_per_epoch() : 0;
  const std::int64_t total_steps =
      f.epochs > 0 && loader ? f.epochs * per_epoch
      : f.epochs > 0 && elastic_batches
          ? (data.across_racks ? f.epochs * elastic_batches->rounds_per_epoch()
                               : std::numeric_limits<std::int64_t>::max())
          : f.warmup + f.iters;
  const int log_every =
      f.log_every > 0 ? f.log_every
      : elastic_batches && f.epochs > 0
          ? static_cast<int>(std::max<std::int64_t>(1, global_per_epoch / 10))
          : static_cast<int>(std::max<std::int64_t>(1, total_steps / 20));
  // An elastic job's schedule runs over the job's progress, not this worker's steps: its
  // position at an iteration is the batches the job took before it over the start size (what
  // a job of the start size would have stepped), the same on every member whoever joined late,
  // and a job that never changes size steps exactly as a fixed one.
  const std::int64_t start_size =
      std::max<std::int64_t>(1, f.start_workers > 0 ? f.start_workers : f.min_workers);
  const bool schedule_by_progress = elastic_job && elastic_batches && f.epochs > 0;
  PHUB_ASSIGN_OR_RETURN(
      const phub::worker::LrSchedule schedule,
      phub::worker::LrSchedule::Create(
          f.lr_schedule, f.optimizer.lr,
          schedule_by_progress ? (f.epochs * global_per_epoch + start_size - 1) / start_size
                               : total_steps));
  phub::IterationMembers members{.member = true, .index = me.rank, .world = me.world_size};
  const auto schedule_step = [&](std::int64_t step) {
    return schedule_by_progress
               ? static_cast<std::int64_t>(members.member_iterations_before) / start_size
               : step;
  };
  // The step's values, when the schedule changes them (else the exchange's fixed ones).
  auto values_at = [&](std::int64_t step) -> std::optional<phub::kernels::StepValues> {
    if (!schedule.Varies()) return std::nullopt;
    return schedule.ValuesAt(schedule_step(step), phub::kernels::ValuesOf(f.optimizer));
  };

  if (elastic_job && me.rank != 0) PHUB_RETURN_IF_ERROR(phub::worker::WarmUpBeforeJoining(f, *model, *backend));
  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<phub::worker::Trainer> trainer,
                        MakeTrainer(f, me, *model, *backend));
  PHUB_RETURN_IF_ERROR(trainer->Init());
  std::int64_t first_step = static_cast<std::int64_t>(trainer->start_iteration());
  if (first_step > 0) {
    spdlog::info("rank {} resumes the job at step {} (phubd holds the weights)", me.rank,
                 first_step);
    PHUB_RETURN_IF_ERROR(seek(first_step));
  }
  // phubd lost or this worker dropped: connect again, go on from where phubd resumes us.
  PHUB_ASSIGN_OR_RETURN(
      phub::worker::Reconnector reconnector,
      phub::worker::Reconnector::Create(
          *model, *backend, me.rank, f.comm == "ps" ? f.reconnect_timeout_ms : 0, me.rank == 0,
          [&](std::chrono::steady_clock::time_point deadline) {
            return MakeTrainer(f, me, *model, *backend, deadline);
          }));
  auto reconnect = [&](const phub::Status& lost, std::int64_t& step) -> phub::Status {
    PHUB_ASSIGN_OR_RETURN(step, reconnector.Reconnect(lost, step, trainer));
    return seek(step);
  };
  spdlog::info("{} batch {} on {}: {} parameters; {} rank {}/{}{}; {} steps", f.model, f.batch,
               backend->Describe(), model->ParameterCount(), trainer->mode(), me.rank,
               me.world_size,
               f.no_overlap ? " (no overlap)" : "", total_steps);
  if (schedule.Varies()) spdlog::info("learning rate: {}", schedule.Describe());

  PHUB_ASSIGN_OR_RETURN(phub::worker::Batch synthetic, phub::worker::MakeSyntheticBatch(*model));
  Tensor x;  // the batch on the device (none on the CPU: the host batch is used)
  if (backend->device() != phub::worker::Device::kCpu) {
    PHUB_ASSIGN_OR_RETURN(x, backend->Allocate(model->input_shape()));
  }
  std::vector<double> step_ms, blocked_ms;
  std::vector<phub::worker::EpochRecord> epochs;
  double epoch_loss = 0;
  std::int64_t last_epoch_step = 0;  // an elastic job's: the step its last epoch ended after
  std::vector<phub::worker::TrainedIteration> trained;  // an elastic job's (run_results.h)
  const auto start = Clock::now();
  if (elastic_job) {
    if (trainer->elastic() == nullptr) {
      return absl::InternalError("--min-workers: the exchange is not elastic");
    }
    std::signal(SIGTERM, AskToLeave);
  }
  bool asked_to_leave = false;
  for (std::int64_t step = first_step;; ++step) {
    bool elastic_done = false;
    if (elastic_job) {
      // Who trains iteration step + 1, and on which batch: phubd told every member before any
      // of them could begin it.
      phub::exchange::ElasticMembership* elastic = trainer->elastic();
      if (g_leave_asked && !asked_to_leave) {
        asked_to_leave = true;
        spdlog::info("rank {}: SIGTERM: leaving the job at the next iteration boundary", me.rank);
        PHUB_RETURN_IF_ERROR(elastic->RequestLeave());
      }
      members = elastic->MembersOf(static_cast<std::uint64_t>(step) + 1);
      elastic_done =
          !members.member ||
          (f.epochs > 0 && elastic_batches && !data.across_racks &&
           members.member_iterations_before >=
               static_cast<std::uint64_t>(f.epochs * global_per_epoch));
      if (!members.member) {
        spdlog::info("rank {}: leaves the job after iteration {}", me.rank, step);
      }
    } else if (fixed_numbered) {
      members = phub::worker::data::FixedMembers(data.rank_in_rack, data.rack_size,
                                                 static_cast<std::uint64_t>(step) + 1);
    }
    if (step == total_steps || elastic_done) {  // the last step's weights in, before saving or evaluating
      const phub::Status finished = trainer->Finish();
      if (finished.ok()) break;
      PHUB_RETURN_IF_ERROR(reconnect(finished, step));
      --step;
      continue;
    }
    phub::worker::data::LabeledBatch real;
    const Tensor* x_host;
    const Tensor* labels;
    if (elastic_batches) {
      PHUB_ASSIGN_OR_RETURN(real, elastic_batches->At(members.member_iterations_before +
                                                      members.index));
      x_host = &real.x;
      labels = &real.labels;
    } else if (loader) {
      PHUB_ASSIGN_OR_RETURN(real, loader->Next());
      x_host = &real.x;
      labels = &real.labels;
    } else {
      phub::worker::FillSynthetic(*model, synthetic, f.seed + static_cast<std::uint64_t>(step));
      x_host = &synthetic.x;
      labels = &synthetic.labels;
    }
    if (x.defined()) PHUB_RETURN_IF_ERROR(backend->CopyFromHost(*x_host, x));
    phub::StatusOr<phub::worker::StepTimes> stepped =
        trainer->Step(x.defined() ? x : *x_host, *labels, values_at(step));
    if (!stepped.ok()) {
      PHUB_RETURN_IF_ERROR(reconnect(stepped.status(), step));
      --step;  // the loop's ++step lands on the step to run
      continue;
    }
    const phub::worker::StepTimes t = *stepped;
    epoch_loss += t.loss;
    if (elastic_job) {
      trained.push_back(
          {step + 1, members.world,
           static_cast<std::int64_t>(members.member_iterations_before + members.index),
           std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
               .count()});
    }
    if (step >= (loader || elastic_batches ? 1 : f.warmup)) {  // Fashion-MNIST runs time all but the first step
      step_ms.push_back(t.total_ms);
      blocked_ms.push_back(t.blocked_ms);
    }
    if ((step + 1) % log_every == 0 || step + 1 == total_steps) {
      spdlog::info("step {}/{}: loss {:.4f}, {:.1f} ms ({:.1f} ms waiting for the exchange){}{}",
                   step + 1,
                   total_steps == std::numeric_limits<std::int64_t>::max()
                       ? std::string("?")
                       : std::to_string(total_steps),
                   t.loss, t.total_ms, t.blocked_ms,
                   schedule.Varies() ? fmt::format(", lr {:.6g}", schedule.LrAt(schedule_step(step))) : "",
                   elastic_job ? fmt::format(", {} members", members.world) : "");
    }
    // An elastic job's epoch ends where the job's global batch count crosses it.
    const bool epoch_ends =
        loader ? (step + 1) % per_epoch == 0
        : elastic_batches
            ? (members.member_iterations_before + members.world) /
                      static_cast<std::uint64_t>(global_per_epoch) >
                  members.member_iterations_before / static_cast<std::uint64_t>(global_per_epoch)
            : false;
    if (epoch_ends) {
      if (const phub::Status finished = trainer->Finish(); !finished.ok()) {
        PHUB_RETURN_IF_ERROR(reconnect(finished, step));
        --step;
        continue;
      }
      PHUB_ASSIGN_OR_RETURN(const phub::worker::Accuracy acc,
                            phub::worker::Evaluate(*model, *backend, *data.test));
      const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
      const std::int64_t epoch =
          loader ? (step + 1) / per_epoch
                 : static_cast<std::int64_t>((members.member_iterations_before + members.world) /
                                             static_cast<std::uint64_t>(global_per_epoch));
      const std::int64_t epoch_steps =
          loader ? per_epoch
                 : std::max<std::int64_t>(1, step + 1 - (epochs.empty() ? first_step : last_epoch_step));
      last_epoch_step = step + 1;
      epochs.push_back({epoch, seconds, acc.fraction(), acc.loss,
                        epoch_loss / static_cast<double>(epoch_steps)});
      epoch_loss = 0;
      spdlog::info("epoch {}: test accuracy {:.2f} % ({} images), test loss {:.4f}, {:.1f} s",
                   epochs.back().epoch, 100 * acc.fraction(), acc.examples, acc.loss, seconds);
    }
  }
  if (!f.save_weights.empty()) PHUB_RETURN_IF_ERROR(phub::worker::SaveWeights(*model, *backend, f.save_weights));
  const double median = Median(step_ms);
  const double blocked = std::accumulate(blocked_ms.begin(), blocked_ms.end(), 0.0);
  const double total = std::accumulate(step_ms.begin(), step_ms.end(), 0.0);
  const double share = total > 0 ? blocked / total : 0;
  const double samples_s = 1000.0 * static_cast<double>(f.batch * me.world_size) / median;
  std::printf(
      "%s batch %lld: median %.1f ms per mini-batch, %.1f samples/s (all %u workers), "
      "communication share %.1f %% (%s, %zu timed steps)\n",
      f.model.c_str(), static_cast<long long>(f.batch), median, samples_s, me.world_size,
      100 * share, trainer->mode().c_str(), step_ms.size());
  if (!epochs.empty()) {
    std::printf("final test accuracy %.2f %%\n", 100 * epochs.back().accuracy);
  }
  if (!f.results.empty()) {
    PHUB_RETURN_IF_ERROR(phub::worker::WriteRunResults(
        f.results, {.model = f.model,
                    .mode = trainer->mode(),
                    .backend = backend->Describe(),
                    .batch = f.batch,
                    .rank = me.rank,
                    .world = me.world_size,
                    .overlap = !f.no_overlap,
                    .median_ms = median,
                    .samples_per_s = samples_s,
                    .comm_share = share,
                    .timed_steps = step_ms.size(),
                    .epochs = std::move(epochs),
                    .elastic = elastic_job,
                    .trained = std::move(trained),
                    .left = !members.member}));
  }
  return trainer->Close();
}

// 2 for what the user can fix in the command line, the data or the environment; 1 otherwise.
int ExitCode(const phub::Status& s) {
  if (s.ok()) return 0;
  return absl::IsInvalidArgument(s) || absl::IsNotFound(s) ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"phub-worker: trains a model of the zoo (forward, backward, optimizer step), alone "
               "or with other workers through phubd (--comm ps), a ring allreduce (--comm "
               "ring) or NCCL (--comm nccl); prints progress, test accuracy per epoch and the time per mini-batch."};
  phub::worker::AddWorkerFlags(app, f);
  CLI11_PARSE(app, argc, argv);
  phub::worker::NoteOptimizerGiven(app, f);
  if (const phub::Status s = phub::worker::CheckScheduleFlags(app, f); !s.ok()) {
    std::fprintf(stderr, "phub-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }

  if (auto s = phub::SetUpLogging(f.log_level, "phub-worker"); !s.ok()) {
    std::fprintf(stderr, "phub-worker: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (f.restarts > 0) {
    return phub::worker::RunSupervised(phub::worker::WithoutRestartsFlag(argc, argv), f.restarts);
  }
  const phub::Status s = Run(f);
  if (!s.ok()) spdlog::error("{}", s.message());
  return ExitCode(s);
}
