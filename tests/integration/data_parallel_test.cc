// Data parallelism is synchronous SGD on the union of the workers' batches: N workers with batch
// b each, through a real phubd (or the ring), end every step with the weights one worker reaches
// with batch N*b on the same examples. The sharded loader makes the batches line up: worker r
// takes positions r, r + N, ... of each epoch's permutation, so at every step the N shards are
// exactly the single worker's N*b examples. fashion-cnn has no BatchNorm and no dropout, so the
// mean of the workers' mean gradients is the big batch's mean gradient (up to float rounding).
// Workers run as threads of this process (each its own model and oneDNN backend). With a
// learning-rate schedule (worker/train/lr_schedule.h) the same: the Trainer hands each step's
// values to the exchange (phubd or the ring steps with them) as to the single worker's own
// optimizer.
#include <gtest/gtest.h>

#include <random>
#include <thread>

#include "phub/exchange/make_exchange.h"
#include "tests/integration/phubd_launcher.h"
#include "worker/backend/onednn/onednn_backend.h"
#include "worker/data/batch_loader.h"
#include "worker/nn/models/models.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/trainer.h"

namespace phub::testing {
namespace {

using worker::Model;
using worker::Trainer;

constexpr std::int64_t kBatch = 4;  // per worker
constexpr int kSteps = 3;
constexpr std::uint64_t kModelSeed = 7, kDataSeed = 3;
const kernels::OptimizerConfig kOptimizer{.kind = kernels::OptimizerKind::kMomentum, .lr = 0.05f,
                                          .momentum = 0.9f};

// Fashion-MNIST-shaped random images (the loader takes any dataset; no files needed).
worker::data::ImageDataset RandomImages(std::int64_t count) {
  worker::data::ImageDataset d;
  d.count = count;
  d.rows = d.cols = 28;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> pixel(0, 1);
  std::uniform_int_distribution<int> label(0, 9);
  d.images.resize(static_cast<std::size_t>(count * 28 * 28));
  for (float& v : d.images) v = pixel(rng);
  for (std::int64_t i = 0; i < count; ++i) d.labels.push_back(static_cast<float>(label(rng)));
  return d;
}

struct Run {
  std::vector<std::vector<std::vector<float>>> weights;  // [step][parameter][element]
  std::string error;
};

std::vector<std::vector<float>> Snapshot(Model& m) {
  std::vector<std::vector<float>> w;
  for (auto* p : m.parameters()) w.emplace_back(p->value.data(), p->value.data() + p->value.numel());
  return w;
}

// A warm-up of 2 steps, then a cosine decay over the other 3: every step has its own lr.
constexpr int kScheduledSteps = 5;
worker::LrSchedule Schedule() {
  auto s = worker::LrSchedule::Create(
      {.kind = worker::LrScheduleKind::kCosine, .warmup_iters = 2, .warmup_start_factor = 0.2},
      kOptimizer.lr, kScheduledSteps);
  if (!s.ok()) std::abort();  // fixed, valid options
  return *s;
}

// Trains `steps` on rank's shard, recording the weights after every step; with a schedule,
// each step with its values.
Run Train(const worker::data::ImageDataset& data, std::int64_t batch, std::uint32_t rank,
          std::uint32_t world, const std::optional<exchange::ExchangeOptions>& comm,
          const std::optional<worker::LrSchedule>& schedule = std::nullopt, int steps = kSteps) {
  Run run;
  auto error = [](const Status& s) { return Run{{}, std::string(s.message())}; };
  auto backend = worker::MakeOnednnBackend();
  if (!backend.ok()) return error(backend.status());
  auto model = worker::MakeModel("fashion-cnn", batch);
  if (!model.ok()) return error(model.status());
  if (auto s = (*model)->Build(**backend, kModelSeed); !s.ok()) return error(s);
  auto loader = worker::data::BatchLoader::Create(data, batch, rank, world, kDataSeed);
  if (!loader.ok()) return error(loader.status());
  std::unique_ptr<Trainer> trainer;
  if (comm) {
    auto t = Trainer::WithExchange(
        **model, **backend,
        [&](std::vector<keys::TensorSpec> tensors, std::shared_ptr<staging::CopyEngine> engine,
            std::vector<std::span<float>> grads, std::vector<std::span<float>> weights) {
          auto o = *comm;
          o.membership.rank = rank;
          return exchange::MakeDeviceExchange(o, std::move(engine), std::move(tensors),
                                              std::move(grads), std::move(weights));
        },
        /*overlap=*/true);
    if (!t.ok()) return {{}, std::string(t.status().message())};
    trainer = std::move(*t);
  } else {
    auto t = Trainer::Local(**model, **backend, kOptimizer);
    if (!t.ok()) return error(t.status());
    trainer = std::move(*t);
  }
  if (auto s = trainer->Init(); !s.ok()) return {{}, std::string(s.message())};
  for (int step = 0; step < steps; ++step) {
    auto b = (*loader)->Next();
    if (!b.ok()) return error(b.status());
    std::optional<kernels::StepValues> values;
    if (schedule) values = schedule->ValuesAt(step, kernels::ValuesOf(kOptimizer));
    if (auto t = trainer->Step(b->x, b->labels, values); !t.ok())
      return {{}, std::string(t.status().message())};
    if (auto s = trainer->Finish(); !s.ok()) return {{}, std::string(s.message())};
    run.weights.push_back(Snapshot(**model));
  }
  if (auto s = trainer->Close(); !s.ok()) run.error = std::string(s.message());
  return run;
}

void ExpectSameTraining(const std::vector<Run>& workers, const Run& single) {
  ASSERT_TRUE(single.error.empty()) << single.error;
  for (std::size_t r = 0; r < workers.size(); ++r) ASSERT_TRUE(workers[r].error.empty()) << workers[r].error;
  for (std::size_t r = 0; r < workers.size(); ++r) {
    ASSERT_EQ(workers[r].weights.size(), single.weights.size()) << "worker " << r;
  }
  for (std::size_t step = 0; step < single.weights.size(); ++step) {
    for (std::size_t p = 0; p < single.weights[step].size(); ++p) {
      const auto& want = single.weights[step][p];
      // Every worker holds the same bytes after every step.
      for (std::size_t r = 1; r < workers.size(); ++r) {
        ASSERT_EQ(workers[r].weights[step][p], workers[0].weights[step][p])
            << "worker " << r << " differs from worker 0 at step " << step << ", parameter " << p;
      }
      double worst = 0, scale = 0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, std::abs(double(workers[0].weights[step][p][i]) - want[i]));
        scale = std::max(scale, std::abs(double(want[i])));
      }
      EXPECT_LE(worst, 1e-5 + 1e-4 * scale) << "step " << step << ", parameter " << p;
    }
  }
}

std::vector<Run> TrainTogether(const worker::data::ImageDataset& data, std::uint32_t world,
                               const exchange::ExchangeOptions& comm,
                               const std::optional<worker::LrSchedule>& schedule = std::nullopt,
                               int steps = kSteps) {
  std::vector<Run> runs(world);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < world; ++r) {
    threads.emplace_back(
        [&, r] { runs[r] = Train(data, kBatch, r, world, comm, schedule, steps); });
  }
  for (auto& t : threads) t.join();
  return runs;
}

TEST(DataParallelTest, TwoWorkersThroughPhubdEqualOneWorkerWithTheirCombinedBatch) {
  const auto data = RandomImages(64);
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--max-world-size", "2", "--cores", "2", "--one-job",
                                        "--optimizer", "momentum", "--lr", "0.05", "--momentum",
                                        "0.9"});
  exchange::ExchangeOptions comm;
  comm.kind = exchange::ExchangeKind::kPs;
  comm.membership.world_size = 2;
  comm.ps.servers = {{"127.0.0.1", phubd.port}};
  const auto workers = TrainTogether(data, 2, comm);
  ExpectSameTraining(workers, Train(data, 2 * kBatch, 0, 1, std::nullopt));
}

TEST(DataParallelTest, TwoWorkersOnTheRingEqualOneWorkerWithTheirCombinedBatch) {
  const auto data = RandomImages(64);
  TempDir dir;
  exchange::ExchangeOptions comm;
  comm.kind = exchange::ExchangeKind::kRing;
  comm.membership.world_size = 2;
  comm.ring.ring.rendezvous = dir.path();
  comm.ring.optimizer = kOptimizer;
  const auto workers = TrainTogether(data, 2, comm);
  ExpectSameTraining(workers, Train(data, 2 * kBatch, 0, 1, std::nullopt));
}

// The single worker with the schedule: the reference the scheduled runs must match, and
// (that the schedule is followed at all) not what the constant lr gives.
Run ScheduledSingle(const worker::data::ImageDataset& data) {
  Run scheduled = Train(data, 2 * kBatch, 0, 1, std::nullopt, Schedule(), kScheduledSteps);
  const Run constant = Train(data, 2 * kBatch, 0, 1, std::nullopt, std::nullopt, kScheduledSteps);
  EXPECT_TRUE(constant.error.empty()) << constant.error;
  if (scheduled.error.empty() && constant.error.empty()) {
    EXPECT_NE(scheduled.weights.front(), constant.weights.front())
        << "the schedule's first lr did not reach the local optimizer";
  }
  return scheduled;
}

TEST(DataParallelTest, TwoWorkersOnTheRingFollowAScheduleLikeOneWorkerWithTheirCombinedBatch) {
  const auto data = RandomImages(64);
  TempDir dir;
  exchange::ExchangeOptions comm;
  comm.kind = exchange::ExchangeKind::kRing;
  comm.membership.world_size = 2;
  comm.ring.ring.rendezvous = dir.path();
  comm.ring.optimizer = kOptimizer;
  const auto workers = TrainTogether(data, 2, comm, Schedule(), kScheduledSteps);
  ExpectSameTraining(workers, ScheduledSingle(data));
}

TEST(DataParallelTest, TwoWorkersThroughPhubdFollowAScheduleLikeOneWorkerWithTheirCombinedBatch) {
  const auto data = RandomImages(64);
  TempDir dir;
  // phubd's own lr is not the schedule's: the workers' values must be the ones stepped with.
  RunningPhubd phubd = StartPhubd(dir, {"--max-world-size", "2", "--cores", "2", "--one-job",
                                        "--optimizer", "sgd", "--lr", "0.3"});
  exchange::ExchangeOptions comm;
  comm.kind = exchange::ExchangeKind::kPs;
  comm.membership.world_size = 2;
  comm.ps.servers = {{"127.0.0.1", phubd.port}};
  comm.ps.client.per_iteration_values = true;  // as phub-worker sets it for a schedule
  comm.ps.client.optimizer = kOptimizer;
  const auto workers = TrainTogether(data, 2, comm, Schedule(), kScheduledSteps);
  ExpectSameTraining(workers, ScheduledSingle(data));
}

}  // namespace
}  // namespace phub::testing
