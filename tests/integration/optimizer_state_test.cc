// The optimizer's state is the user's (docs/protocol.md "The optimizer's state"), through a real
// phubd: a worker fetches the momentum or Adam state phubd holds (equal to a float64 reference),
// and a new job started from fetched weights and state continues bitwise where the first job
// went on without a break; what cannot be fetched or restored is refused, naming why.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <thread>

#include "phub/server/checkpoint/checkpoint_file.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/reference/optimizer_reference.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;

// Two tensors over several chunks and both cores (pieces of more than one per chunk need a chunk
// over 65536 floats: the first tensor has one).
const std::vector<std::uint64_t> kSizes = {70000, 37};
constexpr std::uint64_t kSeed = 5;

client::PsClientOptions Options(const RunningPhubd& phubd, kernels::OptimizerConfig optimizer,
                                const std::string& job) {
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 5000;
  options.optimizer = optimizer;
  options.job = job;
  return options;
}

// Every worker on its own thread runs `body` (its rank's part); the statuses by rank.
std::vector<Status> OnEveryWorker(std::vector<InProcessWorker>& workers,
                                  const std::function<Status(InProcessWorker&)>& body) {
  std::vector<Status> results(workers.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < workers.size(); ++k) {
    threads.emplace_back([&, k] { results[k] = body(workers[k]); });
  }
  for (auto& t : threads) t.join();
  return results;
}

Status Iterations(InProcessWorker& w, std::uint64_t first, std::uint64_t last) {
  for (std::uint64_t it = first; it <= last; ++it) PHUB_RETURN_IF_ERROR(RunIteration(w, it, kSeed));
  return absl::OkStatus();
}

// Momentum SGD with weight decay, 2 workers, 5 iterations: the velocity phubd gives equals the
// float64 reference's (1e-5 relative, 1e-6 floor: a few float32 roundings per step), steps = 5.
TEST(OptimizerStateTest, TheFetchedMomentumEqualsTheFloat64Reference) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "65536"});
  const kernels::OptimizerConfig sgd{.kind = kernels::OptimizerKind::kMomentum, .lr = 0.1f,
                                     .momentum = 0.9f, .weight_decay = 0.01f};
  auto workers = ConnectWorkers(Options(phubd, sgd, "m"), 2, {0, 1}, TestTensors(kSizes), kSeed);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  for (const Status& s : OnEveryWorker(workers, [](InProcessWorker& w) {
         PHUB_RETURN_IF_ERROR(w.client->Init());
         return Iterations(w, 1, 5);
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  StatusOr<client::OptimizerState> state = workers[1].client->FetchOptimizerState();
  ASSERT_TRUE(state.ok()) << state.status();
  EXPECT_EQ(state->steps, 5u);
  ASSERT_EQ(state->arrays.size(), 1u);
  for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
    std::vector<double> w(kSizes[t]), v, s;
    for (std::uint64_t i = 0; i < kSizes[t]; ++i) w[i] = TestValue(kSeed, kInitRank, 0, t, i);
    for (std::uint64_t it = 1; it <= 5; ++it) {
      std::vector<std::vector<double>> grads(2, std::vector<double>(kSizes[t]));
      for (std::uint32_t r = 0; r < 2; ++r) {
        for (std::uint64_t i = 0; i < kSizes[t]; ++i) grads[r][i] = TestValue(kSeed, r, it, t, i);
      }
      RefStep({.kind = RefOptimizer::kMomentum, .lr = 0.1, .momentum = 0.9, .weight_decay = 0.01},
              grads, w, v, s, it);
    }
    ASSERT_EQ(state->arrays[0][t].size(), kSizes[t]);
    for (std::uint64_t i = 0; i < kSizes[t]; ++i) {
      ASSERT_LE(std::abs(state->arrays[0][t][i] - v[i]), 1e-6 + 1e-5 * std::abs(v[i]))
          << "tensor " << t << "[" << i << "]";
    }
  }
  for (auto& w : workers) EXPECT_TRUE(w.client->Close().ok());
}

// Adam: job "first" runs 8 iterations; after 4, rank 0 keeps its weights and the state phubd
// gives. Job "again" starts from those weights (rank 0's INIT) and that state (every rank
// restores it), and runs iterations 5..8 with the same data: its weights end bitwise equal to
// the first job's, Adam's bias correction going on from step 4. Without the restore they differ.
TEST(OptimizerStateTest, AJobStartedFromAFetchedStateContinuesBitwise) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "65536"});
  const kernels::OptimizerConfig adam{.kind = kernels::OptimizerKind::kAdam, .lr = 0.01f,
                                      .weight_decay = 0.001f};
  const auto tensors = TestTensors(kSizes);
  auto first = ConnectWorkers(Options(phubd, adam, "first"), 2, {0, 1}, tensors, kSeed);
  for (auto& w : first) ASSERT_TRUE(w.status.ok()) << w.status;
  std::vector<std::vector<float>> weights_at_4;
  StatusOr<client::OptimizerState> state_at_4 = absl::UnknownError("not fetched");
  for (const Status& s : OnEveryWorker(first, [&](InProcessWorker& w) {
         PHUB_RETURN_IF_ERROR(w.client->Init());
         PHUB_RETURN_IF_ERROR(Iterations(w, 1, 4));
         return absl::OkStatus();
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  weights_at_4 = first[0].weights;
  state_at_4 = first[0].client->FetchOptimizerState();
  ASSERT_TRUE(state_at_4.ok()) << state_at_4.status();
  ASSERT_EQ(state_at_4->steps, 4u);
  ASSERT_EQ(state_at_4->arrays.size(), 2u);
  for (const Status& s :
       OnEveryWorker(first, [&](InProcessWorker& w) { return Iterations(w, 5, 8); })) {
    ASSERT_TRUE(s.ok()) << s;
  }

  const auto run_again = [&](const std::string& job, bool restore) {
    auto again = ConnectWorkers(Options(phubd, adam, job), 2, {0, 1}, tensors, kSeed);
    for (auto& w : again) EXPECT_TRUE(w.status.ok()) << w.status;
    // Into the buffers themselves: the client holds spans of them.
    for (std::size_t t = 0; t < kSizes.size(); ++t) {
      std::memcpy(again[0].weights[t].data(), weights_at_4[t].data(), kSizes[t] * sizeof(float));
    }
    for (const Status& s : OnEveryWorker(again, [&](InProcessWorker& w) {
           PHUB_RETURN_IF_ERROR(w.client->Init());
           if (restore) {
             client::OptimizerState mine{.steps = state_at_4->steps, .arrays = {}};
             if (w.client->rank() == 0) mine = *state_at_4;
             PHUB_RETURN_IF_ERROR(w.client->RestoreOptimizerState(mine));
           }
           return Iterations(w, 5, 8);
         })) {
      EXPECT_TRUE(s.ok()) << s;
    }
    return again;
  };
  auto again = run_again("again", true);
  for (std::size_t r = 0; r < 2; ++r) {
    for (std::size_t t = 0; t < kSizes.size(); ++t) {
      ASSERT_EQ(std::memcmp(again[r].weights[t].data(), first[r].weights[t].data(),
                            kSizes[t] * sizeof(float)),
                0)
          << "rank " << r << " tensor " << t << ": not bitwise the uninterrupted job's";
    }
  }
  auto fresh = run_again("fresh", false);
  EXPECT_NE(std::memcmp(fresh[0].weights[0].data(), first[0].weights[0].data(),
                        kSizes[0] * sizeof(float)),
            0)
      << "the same weights without the state: the test would not see a lost state";
  for (auto* workers : {&first, &again, &fresh}) {
    for (auto& w : *workers) EXPECT_TRUE(w.client->Close().ok());
  }
}

// A job restored at step 4 counts its checkpoints from there: after 2 iterations phubd's
// checkpoint is of iteration 6, and a phubd restarted with --resume on it resumes the workers at
// 6, Adam's bias correction right with no offset: iterations 7..8 end bitwise where a job that
// ran 1..8 without a break does.
TEST(OptimizerStateTest, ARestoredJobsCheckpointsResumeAtTheRightStep) {
  TempDir dir;
  const std::string ckpt = dir.File("ckpt");
  const kernels::OptimizerConfig adam{.kind = kernels::OptimizerKind::kAdam, .lr = 0.01f};
  const auto tensors = TestTensors(kSizes);
  std::vector<std::vector<float>> weights_at_4, uninterrupted;
  client::OptimizerState state_at_4;
  {
    RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "65536"});
    auto first = ConnectWorkers(Options(phubd, adam, "first"), 2, {0, 1}, tensors, kSeed);
    for (auto& w : first) ASSERT_TRUE(w.status.ok()) << w.status;
    for (const Status& s : OnEveryWorker(first, [](InProcessWorker& w) {
           PHUB_RETURN_IF_ERROR(w.client->Init());
           return Iterations(w, 1, 4);
         })) {
      ASSERT_TRUE(s.ok()) << s;
    }
    weights_at_4 = first[0].weights;
    auto fetched = first[0].client->FetchOptimizerState();
    ASSERT_TRUE(fetched.ok()) << fetched.status();
    state_at_4 = *fetched;
    for (const Status& s :
         OnEveryWorker(first, [](InProcessWorker& w) { return Iterations(w, 5, 8); })) {
      ASSERT_TRUE(s.ok()) << s;
    }
    uninterrupted = first[0].weights;
    for (auto& w : first) EXPECT_TRUE(w.client->Close().ok());
  }
  {
    RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "65536",
                                          "--checkpoint-dir", ckpt, "--checkpoint-every", "2"});
    auto restored = ConnectWorkers(Options(phubd, adam, ""), 2, {0, 1}, tensors, kSeed);
    for (auto& w : restored) ASSERT_TRUE(w.status.ok()) << w.status;
    for (std::size_t t = 0; t < kSizes.size(); ++t) {
      std::memcpy(restored[0].weights[t].data(), weights_at_4[t].data(),
                  kSizes[t] * sizeof(float));
    }
    for (const Status& s : OnEveryWorker(restored, [&](InProcessWorker& w) {
           PHUB_RETURN_IF_ERROR(w.client->Init());
           client::OptimizerState mine{.steps = 4, .arrays = {}};
           if (w.client->rank() == 0) mine = state_at_4;
           PHUB_RETURN_IF_ERROR(w.client->RestoreOptimizerState(mine));
           return Iterations(w, 5, 6);
         })) {
      ASSERT_TRUE(s.ok()) << s;
    }
    StatusOr<server::LoadedCheckpoint> loaded;
    ASSERT_TRUE(WaitFor(
        [&] {
          loaded = server::LoadNewestCheckpoint(ckpt);
          return loaded.ok() && loaded->snapshot.chunks[0].iteration == 6;
        },
        std::chrono::milliseconds(20000)))
        << (loaded.ok() ? "its chunks are not at step 6" : loaded.status().ToString());
    for (auto& w : restored) EXPECT_TRUE(w.client->Close().ok());
  }
  RunningPhubd phubd =
      StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "65536", "--resume", ckpt});
  auto resumed = ConnectWorkers(Options(phubd, adam, ""), 2, {0, 1}, tensors, kSeed);
  for (auto& w : resumed) {
    ASSERT_TRUE(w.status.ok()) << w.status;
    EXPECT_EQ(w.client->resume_iteration(), 6u);
  }
  for (const Status& s : OnEveryWorker(resumed, [](InProcessWorker& w) {
         PHUB_RETURN_IF_ERROR(w.client->Init());
         return Iterations(w, 7, 8);
       })) {
    ASSERT_TRUE(s.ok()) << s;
  }
  for (std::size_t t = 0; t < kSizes.size(); ++t) {
    EXPECT_EQ(std::memcmp(resumed[0].weights[t].data(), uninterrupted[t].data(),
                          kSizes[t] * sizeof(float)),
              0)
        << "tensor " << t << ": not bitwise the uninterrupted job's";
  }
}

TEST(OptimizerStateTest, WhatCannotBeFetchedOrRestoredIsRefusedNamingWhy) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "1"});
  const kernels::OptimizerConfig sgd{.kind = kernels::OptimizerKind::kMomentum, .lr = 0.1f};
  // Summation mode keeps no state.
  auto average = ConnectWorkers(Options(phubd, {.kind = kernels::OptimizerKind::kAverage}, "avg"),
                                1, {0}, TestTensors({10}), kSeed);
  ASSERT_TRUE(average[0].status.ok()) << average[0].status;
  ASSERT_TRUE(average[0].client->Init().ok());
  auto none = average[0].client->FetchOptimizerState();
  EXPECT_TRUE(absl::IsFailedPrecondition(none.status())) << none.status();
  EXPECT_THAT(none.status().message(), HasSubstr("no state to give"));
  EXPECT_TRUE(average[0].client->Close().ok());

  // After a push: refused by the client; ranks that disagree on the steps: refused by phubd.
  auto workers = ConnectWorkers(Options(phubd, sgd, "late"), 2, {0, 1}, TestTensors({10}), kSeed);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  const auto results = OnEveryWorker(workers, [](InProcessWorker& w) {
    PHUB_RETURN_IF_ERROR(w.client->Init());
    client::OptimizerState state{.steps = w.client->rank() == 0 ? 3u : 4u,
                                 .arrays = {{std::vector<float>(10, 0.5f)}}};
    return w.client->RestoreOptimizerState(state);
  });
  for (const Status& s : results) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("every rank loads the same checkpoint"));
  }
  for (const Status& s : OnEveryWorker(workers, [](InProcessWorker& w) {
         PHUB_RETURN_IF_ERROR(RunIteration(w, 1, kSeed));
         Status late = w.client->RestoreOptimizerState({.steps = 1, .arrays = {}});
         return late.ok() ? absl::InternalError("a restore after a push was taken") : late;
       })) {
    EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    EXPECT_THAT(s.message(), HasSubstr("before the first Push"));
  }
  for (auto& w : workers) EXPECT_TRUE(w.client->Close().ok());
}

}  // namespace
}  // namespace phub::testing
