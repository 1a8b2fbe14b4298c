// A worker's compute in the simulator: backward produces each tensor's gradient after its
// compute, and the PS exchanges it while backward goes on, so with compute enough only the last
// tensor's exchange is left after backward. References worked out by hand from the scenario.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "phub/sim/platform.h"
#include "phub/sim/simulate.h"

namespace phub::sim {
namespace {

using ::testing::AllOf;
using ::testing::Gt;
using ::testing::Lt;

Scenario WithCompute(double forward_s, std::uint32_t tensors, double backward_s_each) {
  Scenario s;
  s.calibration.incast_floor = 1;  // a link's rate, however many push into it
  s.calibration.incast_slope = 0;
  s.workers = 4;
  s.forward_seconds = forward_s;
  for (std::uint32_t t = 0; t < tensors; ++t) s.tensors.push_back({1 << 20, backward_s_each});
  return s;
}

// Ten 1 MiB tensors, each 50 ms of backward (a MiB takes ~8.8 ms on the 1 Gbit/s links): each
// is pushed and back while the next one's backward runs, so the iteration is the compute plus
// the last tensor's push and weights (one MiB each way over a worker's link) and its sum.
TEST(SimulateComputeTest, OnlyTheLastTensorsExchangeIsLeftAfterBackward) {
  const Scenario s = WithCompute(0.1, 10, 0.05);
  auto p = Simulate(s);
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_DOUBLE_EQ(p->compute_seconds, 0.6);
  const double last = 2.0 * (1 << 20) / WorkerBytesPerSecond(s);
  EXPECT_THAT(p->seconds_per_iteration / (0.6 + last), AllOf(Gt(1.0), Lt(1.02)));
  EXPECT_EQ(p->bottleneck, "a worker's compute");
  // The ring with one allreduce after backward (bucket_bytes 0): compute, then 2 (N - 1) / N S.
  Scenario ring = s;
  ring.scheme = Scheme::kRing;
  auto r = Simulate(ring);
  ASSERT_TRUE(r.ok()) << r.status();
  const double allreduce = 2.0 * 3 / 4 * 10 * (1 << 20) / WorkerBytesPerSecond(s);
  EXPECT_NEAR(r->seconds_per_iteration, 0.6 + allreduce, 1e-3 * (0.6 + allreduce));
}

// Backward (10 x 5 ms) shorter than the exchange (~107 ms): the exchange runs beside it, so
// the iteration takes at most the first tensor's backward more than the exchange alone (the
// pushes start that much later), not the 50 ms of backward more. It can take less than that
// (the pushes, staggered by backward, leave the last weights less to share the link with).
TEST(SimulateComputeTest, AnExchangeLongerThanBackwardHidesIt) {
  Scenario s = WithCompute(0, 10, 0.005);
  auto with = Simulate(s);
  for (Tensor& t : s.tensors) t.backward_seconds = 0;
  auto without = Simulate(s);
  ASSERT_TRUE(with.ok() && without.ok());
  EXPECT_THAT(with->seconds_per_iteration - without->seconds_per_iteration,
              AllOf(Gt(-1e-6), Lt(0.005 + 1e-6)));
  EXPECT_NE(with->bottleneck, "a worker's compute");
}

}  // namespace
}  // namespace phub::sim
