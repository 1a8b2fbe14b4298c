// Elastic jobs through a real phubd (docs/design.md "Elastic jobs"): members join a running job
// and leave it at iteration boundaries (asking to leave, saying Goodbye, or dying), the others
// never wait for them, and the weights equal a float64 reference that averages each iteration
// over the workers that pushed it; every member agrees on each iteration's members.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/reference/optimizer_reference.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::uint64_t> kSizes = {300, 17};
constexpr std::uint64_t kSeed = 5;
constexpr float kLr = 0.1f, kMomentum = 0.9f;

client::PsClientOptions Elastic(const RunningPhubd& phubd, std::uint32_t min_workers,
                                std::uint32_t start_workers) {
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 5000;
  options.optimizer = kernels::OptimizerConfig{
      .kind = kernels::OptimizerKind::kMomentum, .lr = kLr, .momentum = kMomentum};
  options.min_workers = min_workers;
  options.start_workers = start_workers;
  return options;
}

// What the workers did, for the reference: by iteration, the ranks that pushed it whole, and
// the members each worker was told (world, index) for it.
struct Record {
  std::mutex mu;
  std::map<std::uint64_t, std::set<std::uint32_t>> pushed;
  std::map<std::uint64_t, std::map<std::uint32_t, IterationMembers>> told;
  void Pushed(std::uint64_t it, std::uint32_t rank, const IterationMembers& m) {
    std::lock_guard lock(mu);
    pushed[it].insert(rank);
    told[it][rank] = m;
  }
};

// The weights after `last` iterations of momentum SGD from TestValue(kInitRank) with, in each
// iteration, the mean of the gradients of the ranks that pushed it; float64.
std::vector<std::vector<double>> Reference(const Record& record, std::uint64_t last) {
  std::vector<std::vector<double>> weights;
  for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
    std::vector<double> w(kSizes[t]), v, s;
    for (std::uint64_t i = 0; i < kSizes[t]; ++i) w[i] = TestValue(kSeed, kInitRank, 0, t, i);
    const RefConfig config{.kind = RefOptimizer::kMomentum, .lr = kLr, .momentum = kMomentum};
    for (std::uint64_t it = 1; it <= last; ++it) {
      std::vector<std::vector<double>> grads;
      for (std::uint32_t rank : record.pushed.at(it)) {
        grads.emplace_back(kSizes[t]);
        for (std::uint64_t i = 0; i < kSizes[t]; ++i) grads.back()[i] = TestValue(kSeed, rank, it, t, i);
      }
      RefStep(config, grads, w, v, s, it);
    }
    weights.push_back(std::move(w));
  }
  return weights;
}

void ExpectNear(const InProcessWorker& worker, const std::vector<std::vector<double>>& reference,
                const std::string& who) {
  // 80 float32 momentum steps on values of order 1 leave a few 1e-6; using one iteration's
  // wrong member set moves the weights by > 1e-3.
  for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
    for (std::uint64_t i = 0; i < kSizes[t]; ++i) {
      ASSERT_LE(std::abs(worker.weights[t][i] - reference[t][i]),
                1e-5 + 1e-4 * std::abs(reference[t][i]))
          << who << ": tensor " << t << "[" << i << "]: got " << worker.weights[t][i]
          << ", reference " << reference[t][i];
    }
  }
}

// Runs `w` from iteration `first` while it is a member and `until(it)` says go on, recording
// each iteration. Returns the last iteration it pushed.
Status RunWhileMember(InProcessWorker& w, std::uint64_t first, Record& record,
                      const std::function<bool(std::uint64_t)>& go_on, std::uint64_t& last) {
  last = first - 1;
  for (std::uint64_t it = first; go_on(it); ++it) {
    const IterationMembers m = w.client->MembersOf(it);
    if (!m.member) break;
    PHUB_RETURN_IF_ERROR(RunIteration(w, it, kSeed));
    record.Pushed(it, w.client->rank(), m);
    last = it;
  }
  return absl::OkStatus();
}

void Connect(InProcessWorker& w, const client::PsClientOptions& options, std::uint32_t rank,
             std::uint32_t max) {
  w = std::move(ConnectWorkers(options, max, {rank}, TestTensors(kSizes), kSeed)[0]);
}

// 2 -> 4 -> 3 -> 2 workers over 80 iterations: ranks 0 and 1 start the job (min 2, max 4);
// ranks 2 and 3 join once it runs; rank 3 asks to leave (a scheduler's SIGTERM), rank 2 says
// Goodbye after an iteration. Ranks 0 and 1 never wait for any of it beyond a change, and end
// with the reference's weights; every member of an iteration was told the same members.
TEST(ElasticTest, JoinsAndLeavesMatchAFloat64ReferenceOverEachIterationsMembers) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "256"});
  const client::PsClientOptions options = Elastic(phubd, 2, 2);
  constexpr std::uint64_t kLast = 80;
  Record record;
  std::vector<InProcessWorker> workers(4);
  auto starters = ConnectWorkers(options, 4, {0, 1}, TestTensors(kSizes), kSeed);
  for (auto& w : starters) ASSERT_TRUE(w.status.ok()) << w.status;
  workers[0] = std::move(starters[0]);
  workers[1] = std::move(starters[1]);
  EXPECT_EQ(workers[0].client->rank(), 0u);
  std::atomic<std::uint64_t> progress{0};  // rank 0's last iteration
  std::vector<Status> results(4);
  std::vector<std::uint64_t> first(4, 1), last(4, 0);
  std::vector<std::thread> threads;
  for (std::uint32_t k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      results[k] = workers[k].client->Init();
      if (!results[k].ok()) return;
      results[k] = RunWhileMember(workers[k], 1, record, [&, k](std::uint64_t it) {
        if (k == 0) progress = it - 1;
        return it <= kLast;
      }, last[k]);
    });
  }
  const auto wait_for = [&](std::uint64_t it) {
    while (progress < it && results[0].ok()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  wait_for(10);
  for (std::uint32_t k = 2; k < 4; ++k) {
    threads.emplace_back([&, k] {
      Connect(workers[k], options, k, 4);
      if (!workers[k].status.ok()) {
        results[k] = workers[k].status;
        return;
      }
      results[k] = workers[k].client->Init();
      if (!results[k].ok()) return;
      first[k] = workers[k].client->resume_iteration() + 1;
      if (k == 3) {
        // Asks to leave once it has trained 15 iterations, and trains on until phubd says its
        // last (the iteration before the change).
        bool asked = false;
        results[k] = RunWhileMember(workers[k], first[k], record, [&](std::uint64_t it) {
          if (!asked && it >= first[k] + 15) {
            asked = true;
            EXPECT_TRUE(workers[k].client->RequestLeave().ok());
          }
          return it <= kLast;
        }, last[k]);
      } else {
        // Goodbye after 30 iterations: it finishes the iteration in flight, then leaves.
        results[k] = RunWhileMember(workers[k], first[k], record, [&](std::uint64_t it) {
          return it < first[k] + 30 && it <= kLast;
        }, last[k]);
      }
      if (results[k].ok()) results[k] = workers[k].client->Close();
    });
  }
  for (auto& t : threads) t.join();
  for (std::uint32_t k = 0; k < 4; ++k) ASSERT_TRUE(results[k].ok()) << "rank " << k << ": " << results[k];
  EXPECT_EQ(last[0], kLast);
  EXPECT_EQ(last[1], kLast);
  EXPECT_GT(first[2], 10u);
  EXPECT_LT(last[3], kLast) << "rank 3 asked to leave and was never let go";

  // Every iteration: the ranks that pushed it are members of it, told the same world, at
  // distinct places; and the job went 2 -> 4 -> 3 -> 2.
  std::set<std::size_t> sizes_seen;
  std::vector<std::size_t> sizes;
  for (std::uint64_t it = 1; it <= kLast; ++it) {
    const auto& pushed = record.pushed.at(it);
    std::set<std::uint32_t> places;
    for (std::uint32_t rank : pushed) {
      const IterationMembers& m = record.told.at(it).at(rank);
      EXPECT_TRUE(m.member);
      places.insert(m.index);
      // Rank 2 leaves by Goodbye: until the change that tells the others, they still count
      // it (its data shard is skipped); every other iteration's world is who pushed it.
      EXPECT_GE(m.world, pushed.size()) << "iteration " << it;
      if (last[2] == 0 || it <= last[2]) {
        EXPECT_EQ(m.world, pushed.size()) << "iteration " << it;
      }
    }
    EXPECT_EQ(places.size(), pushed.size()) << "iteration " << it << ": two members at one place";
    if (sizes.empty() || sizes.back() != pushed.size()) sizes.push_back(pushed.size());
  }
  // The joiners may come in one change or two.
  EXPECT_THAT(sizes, ::testing::AnyOf(::testing::ElementsAre(2, 4, 3, 2),
                                      ::testing::ElementsAre(2, 3, 4, 3, 2)));

  const auto reference = Reference(record, kLast);
  ExpectNear(workers[0], reference, "rank 0");
  ExpectNear(workers[1], reference, "rank 1");
  // The leavers' weights: those of their last iteration.
  for (std::uint32_t k = 2; k < 4; ++k) {
    ExpectNear(workers[k], Reference(record, last[k]), absl::StrCat("rank ", k));
  }
  for (std::uint32_t k = 0; k < 2; ++k) EXPECT_TRUE(workers[k].client->Close().ok());
}

}  // namespace
}  // namespace phub::testing
