#include "phub/server/job/job_progress.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>
#include <vector>

namespace phub::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The cores' adds from their own threads sum exactly (relaxed atomics, a slot each).
TEST(JobTraffic, SumsEveryCoresAdds) {
  JobTraffic traffic(4);
  std::vector<std::thread> cores;
  for (std::size_t c = 0; c < 4; ++c) {
    cores.emplace_back([&traffic, c] {
      for (int i = 0; i < 10000; ++i) {
        traffic.core(c).received_bytes.fetch_add(c + 1, std::memory_order_relaxed);
        traffic.core(c).sent_bytes.fetch_add(2, std::memory_order_relaxed);
        traffic.core(c).aggregations.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : cores) t.join();
  EXPECT_EQ(traffic.received_bytes(), 10000u * (1 + 2 + 3 + 4));
  EXPECT_EQ(traffic.sent_bytes(), 4u * 10000 * 2);
  EXPECT_EQ(traffic.aggregations(), 40000u);
  EXPECT_EQ(alignof(JobCoreTraffic), 64u);  // each core's slot on cache lines of its own
}

// The iteration is the least chunk's: aggregations over the chunks, rounded down, from the start.
TEST(JobProgress, IterationIsTheAggregationsOverTheChunksFromTheStart) {
  auto traffic = std::make_shared<JobTraffic>(2);
  JobProgress progress;
  EXPECT_EQ(progress.Iteration(), 0u);
  const auto t0 = JobProgress::Clock::now();
  progress.Start(traffic, /*chunks=*/5, /*start_iteration=*/100, t0);
  EXPECT_EQ(progress.Iteration(), 100u);
  traffic->core(0).aggregations += 3;
  traffic->core(1).aggregations += 1;  // 4 of 5 chunks moved on: not yet an iteration
  EXPECT_EQ(progress.Iteration(), 100u);
  traffic->core(1).aggregations += 1;
  EXPECT_EQ(progress.Iteration(), 101u);
  traffic->core(0).aggregations += 9;  // 14: two iterations and 4 chunks of the third
  EXPECT_EQ(progress.Iteration(), 102u);
}

// The rate: since the start at the first read, then since the oldest sample 1 to 30 s old.
TEST(JobProgress, RateIsOverTheRecentSamples) {
  auto traffic = std::make_shared<JobTraffic>(1);
  JobProgress progress;
  const auto t0 = JobProgress::Clock::now();
  progress.Start(traffic, /*chunks=*/1, 0, t0);
  traffic->core(0).aggregations = 20;
  EXPECT_DOUBLE_EQ(progress.IterationsPerSecond(t0 + seconds(10)), 2.0);  // since the start
  traffic->core(0).aggregations = 30;
  // Half a second after that sample: too recent, the start is still the base.
  EXPECT_DOUBLE_EQ(progress.IterationsPerSecond(t0 + milliseconds(10500)), 30 / 10.5);
  traffic->core(0).aggregations = 50;
  // 2 s after the sample at 10 s (20 iterations): 30 iterations in 2 s.
  EXPECT_DOUBLE_EQ(progress.IterationsPerSecond(t0 + seconds(12)), 15.0);
  // A stop: the rate falls to 0 within the window.
  EXPECT_DOUBLE_EQ(progress.IterationsPerSecond(t0 + seconds(45)), 0.0);
  EXPECT_DOUBLE_EQ(JobProgress().IterationsPerSecond(t0), 0.0);  // never started
}

}  // namespace
}  // namespace phub::server
