// phub/sim's PS host of several NICs and its PBox shared by jobs, against references worked
// out by hand from the scenario (no SimGrid in them): two NICs of half the rate carry what one
// of the full rate does, one half NIC alone takes twice as long, cores alternate over the NICs
// (3 cores on 2: one NIC carries 2/3); k equal jobs on a server its pacing bounds each get 1/k
// of it, weights 2:1 give 2:1, and a job whose own links bind leaves the rest to the others.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "phub/sim/pacing.h"
#include "phub/sim/platform.h"
#include "phub/sim/simulate.h"

namespace phub::sim {
namespace {

using ::testing::DoubleNear;
using ::testing::ElementsAre;

// N = 4 workers of 1 Gbit/s, one gradient, without the calibrated incast (its goodput the
// same however many push: the references are links' rates).
Scenario Pbox(double mib) {
  Scenario s;
  s.calibration.incast_floor = 1;
  s.calibration.incast_slope = 0;
  s.workers = 4;
  s.network = Network::kPbox;
  s.chunk_bytes = 256 << 10;
  s.tensors = {{static_cast<std::uint64_t>(mib * (1 << 20)), 0}};
  return s;
}

// The exchange-only stream of bench/tenants (each tensor pushed again once its weights are
// in): no pipeline filling and draining each iteration, so a rate's time is met within 1 %.
Scenario Streaming(Network network) {
  Scenario s = Pbox(0);
  s.network = network;
  s.streaming = true;
  s.chunk_bytes = 1 << 20;
  s.iterations = 5;
  s.tensors.assign(16, {2 << 20, 0});  // 32 MiB
  return s;
}

double Bytes(const Scenario& s) {
  double total = 0;
  for (const Tensor& t : s.tensors) total += static_cast<double>(t.bytes);
  return total;
}

double Seconds(const Scenario& s) {
  auto p = Simulate(s);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? p->seconds_per_iteration : 0;
}

std::vector<double> JobSeconds(const Scenario& s) {
  auto p = Simulate(s);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? p->job_seconds_per_iteration : std::vector<double>{};
}

TEST(NicsTest, TwoHalfNicsCarryWhatOneFullNicDoesAndOneHalfNicTakesTwiceAsLong) {
  Scenario s = Pbox(64);
  const double one = Bytes(s) / WorkerBytesPerSecond(s);  // S / B: the workers' links
  s.ps_nic_gbps = 4;  // one NIC of N x B
  const double full = Seconds(s);
  s.ps_nics = 2;
  s.ps_nic_gbps = 2;  // two of N x B / 2, a core on each
  const double two_half = Seconds(s);
  s.ps_nics = 1;  // one of them alone: N x S through N x B / 2, 2 S / B
  const double one_half = Seconds(s);
  EXPECT_GT(full, one);
  EXPECT_LT(full, 1.05 * one);
  EXPECT_NEAR(two_half, full, 0.01 * full);
  EXPECT_GT(one_half, 2 * one);
  EXPECT_LT(one_half, 1.05 * 2 * one);
}

TEST(NicsTest, CoresAlternateOverTheNicsAndEachCoresConnectionsUseItsOwn) {
  // 3 cores on 2 NICs of N x B / 2: cores 0 and 2 on NIC 0, which carries 2/3 of N x S
  // (chunks spread evenly over cores by bytes): 4 S x 2/3 over 2 B = 4/3 S / B.
  Scenario s = Pbox(64);
  s.ps_cores = 3;
  s.ps_nics = 2;
  const double busiest = 4 * Bytes(s) * 2.0 / 3 / (2 * WorkerBytesPerSecond(s));
  const double t = Seconds(s);
  EXPECT_GT(t, busiest);
  EXPECT_LT(t, 1.05 * busiest);
  s.ps_cores = 4;  // 2 on each: S / B again
  EXPECT_LT(Seconds(s), 1.05 * Bytes(s) / WorkerBytesPerSecond(s));
}

TEST(PacingTest, WeightedSharesAreMaxMinByWeightAndLeaveWhatAJobCannotUse) {
  EXPECT_THAT(WeightedShares(300, {1000, 1000}, {2, 1}),
              ElementsAre(DoubleNear(200, 1e-9), DoubleNear(100, 1e-9)));
  // The weight-2 job can take 50: the other gets the rest.
  EXPECT_THAT(WeightedShares(300, {50, 1000}, {2, 1}),
              ElementsAre(DoubleNear(50, 1e-9), DoubleNear(250, 1e-9)));
  EXPECT_THAT(WeightedShares(300, {100, 100, 1000}, {1, 1, 1}),
              ElementsAre(DoubleNear(100, 1e-9), DoubleNear(100, 1e-9), DoubleNear(100, 1e-9)));
  EXPECT_THAT(WeightedShares(300, {10, 20}, {1, 1}),  // all fit
              ElementsAre(DoubleNear(10, 1e-9), DoubleNear(20, 1e-9)));
}

TEST(JobsTest, KEqualJobsOnAServerItsPacingBoundsEachGetOneKth) {
  // A cloud server (its link B) paced at P = 0.9 B: the weights out to all N workers go at P,
  // each of k jobs of N / k workers at P / k, so each job's N / k x S take N S / P.
  for (const std::vector<Job>& jobs : {std::vector<Job>{{2, 1}, {2, 1}},
                                       std::vector<Job>{{1, 1}, {1, 1}, {1, 1}, {1, 1}}}) {
    Scenario s = Streaming(Network::kCloud);
    s.jobs = jobs;
    s.ps_pace_gbps = 0.9;
    const double reference = 4 * Bytes(s) / (0.9e9 / 8);
    const std::vector<double> each = JobSeconds(s);
    ASSERT_EQ(each.size(), jobs.size());
    for (double t : each) EXPECT_NEAR(t, reference, 0.01 * reference) << jobs.size() << " jobs";
  }
  // Not paced, the server's link is shared per connection, as evenly: N S over its goodput.
  Scenario s = Streaming(Network::kCloud);
  s.jobs = {{2, 1}, {2, 1}};
  const double reference = 4 * Bytes(s) / PboxBytesPerSecond(s);
  for (double t : JobSeconds(s)) EXPECT_NEAR(t, reference, 0.01 * reference);
}

TEST(JobsTest, WeightsTwoToOneGiveTwoToOneAndAJobItsLinksBindLeavesTheRest) {
  Scenario s = Streaming(Network::kCloud);
  s.jobs = {{2, 2}, {2, 1}};
  s.ps_pace_gbps = 0.9;
  const double paced = 0.9e9 / 8;
  // Shares 2/3 P and 1/3 P of 2 S each: 3 S / P and 6 S / P.
  std::vector<double> t = JobSeconds(s);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0], 3 * Bytes(s) / paced, 0.01 * 3 * Bytes(s) / paced);
  EXPECT_NEAR(t[1] / t[0], 2.0, 0.02);
  // On a PBox (link N x B) paced at 0.9 N B the weight-2 job's share (0.6 N B) is more than its
  // 2 workers' links take (2 B): it goes at their rate, the other gets the pace's rest.
  s.network = Network::kPbox;
  s.ps_pace_gbps = 3.6;
  const double links = 2 * WorkerBytesPerSecond(s);
  t = JobSeconds(s);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0], 2 * Bytes(s) / links, 0.01 * 2 * Bytes(s) / links);
  const double rest = 3.6e9 / 8 - links;
  EXPECT_NEAR(t[1], 2 * Bytes(s) / rest, 0.01 * 2 * Bytes(s) / rest);
}

TEST(JobsTest, AScenarioOfJobsWithoutMeaningIsRefused) {
  Scenario s = Streaming(Network::kCloud);
  s.jobs = {{2, 1}, {1, 1}};  // 3 of 4 workers
  EXPECT_THAT(std::string(Simulate(s).status().message()), ::testing::HasSubstr("add up"));
  s.jobs = {{2, 1}, {2, 0}};
  EXPECT_THAT(std::string(Simulate(s).status().message()), ::testing::HasSubstr("weight"));
  s = Pbox(1);
  s.scheme = Scheme::kRing;
  s.ps_nics = 2;
  EXPECT_THAT(std::string(Simulate(s).status().message()), ::testing::HasSubstr("ps_nics"));
}

}  // namespace
}  // namespace phub::sim
