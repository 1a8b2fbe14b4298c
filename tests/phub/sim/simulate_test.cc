// phub/sim against references worked out by hand from the scenario (no SimGrid in them): a
// ring's 2 (N - 1) / N x S over a link, a PBox whose link carries N x S each way, a PBox bound
// by its cores; merging identical workers into groups leaves the times as they were; a
// scenario no simulation can mean is refused naming the field.
#include "phub/sim/simulate.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "phub/sim/chunks.h"
#include "phub/sim/platform.h"

namespace phub::sim {
namespace {

using ::testing::AllOf;
using ::testing::Gt;
using ::testing::HasSubstr;
using ::testing::Lt;

// A prediction over its hand-worked reference: both are simulated seconds, so this checks the
// model, not this machine's speed (no clock is read). Above 1 (the pipeline fills and drains
// around the bound) and below `most`.
double OverReference(double simulated_s, double reference_s) { return simulated_s / reference_s; }
auto AboveBoundBy(double most) { return AllOf(Gt(1.0), Lt(most)); }

// Without the calibrated incast (a link's goodput the same however many push into it), so that
// the reference is a link's rate; IncastSlowsAServerThatNPushInto has it.
Scenario OneGradient(Scheme scheme, std::uint32_t workers, double mib) {
  Scenario s;
  s.calibration.incast_floor = 1;
  s.calibration.incast_slope = 0;
  s.scheme = scheme;
  s.workers = workers;
  s.tensors = {{static_cast<std::uint64_t>(mib * (1 << 20)), 0}};
  return s;
}

double Bytes(const Scenario& s) { return static_cast<double>(s.tensors[0].bytes); }

TEST(SimulateTest, ARingMovesTwoNMinusOneOverNOfTheGradientOverEachLink) {
  for (std::uint32_t n : {2u, 3u, 8u, 100u}) {
    const Scenario s = OneGradient(Scheme::kRing, n, 64);
    auto p = Simulate(s);
    ASSERT_TRUE(p.ok()) << p.status();
    const double reference = 2.0 * (n - 1) / n * Bytes(s) / WorkerBytesPerSecond(s);
    EXPECT_NEAR(p->seconds_per_iteration, reference, 1e-6 * reference) << n << " workers";
    EXPECT_EQ(p->bottleneck, "a worker's link");
  }
}

TEST(SimulateTest, APboxOfNLinksTakesAboutOneGradientTimeAndACloudServerNOfThem) {
  for (std::uint32_t n : {2u, 4u, 16u}) {
    Scenario s = OneGradient(Scheme::kPs, n, 100);
    s.network = Network::kPbox;
    auto pbox = Simulate(s);
    ASSERT_TRUE(pbox.ok()) << pbox.status();
    const double one = Bytes(s) / WorkerBytesPerSecond(s);
    // Pushes and weights overlap chunk by chunk: one gradient's time plus the pipeline's fill
    // (a chunk each way) and the last chunk's sum.
    EXPECT_THAT(OverReference(pbox->seconds_per_iteration, one), AboveBoundBy(1.05))
        << n << " workers";
    s.network = Network::kCloud;
    auto cloud = Simulate(s);
    ASSERT_TRUE(cloud.ok()) << cloud.status();
    EXPECT_NEAR(cloud->seconds_per_iteration, n * one, 0.05 * n * one) << n << " workers";
    EXPECT_EQ(cloud->bottleneck, "the PBox's link");
  }
}

TEST(SimulateTest, KServersOfOneLinkEachTakeNOverKGradientTimes) {
  for (auto [n, k] : {std::pair{4u, 4u}, std::pair{4u, 2u}, std::pair{8u, 2u}}) {
    Scenario s = OneGradient(Scheme::kPs, n, 64);
    s.network = Network::kCloud;
    s.ps_hosts = k;
    s.chunk_bytes = (1 << 20) / n;  // as run_exchange.py's ps-multi: the pipeline's fill small
    auto p = Simulate(s);
    ASSERT_TRUE(p.ok()) << p.status();
    const double reference = static_cast<double>(n) / k * Bytes(s) / WorkerBytesPerSecond(s);
    EXPECT_THAT(OverReference(p->seconds_per_iteration, reference), AboveBoundBy(1.05))
        << n << " workers, " << k << " servers";
    EXPECT_EQ(p->bottleneck, "a PS host's link");
  }
}

TEST(SimulateTest, IncastSlowsAServerThatNPushIntoAsCalibrated) {
  for (std::uint32_t n : {2u, 4u, 8u}) {
    Scenario s = OneGradient(Scheme::kPs, n, 64);
    s.network = Network::kCloud;
    s.calibration = Calibration{};
    auto p = Simulate(s);
    ASSERT_TRUE(p.ok()) << p.status();
    const Calibration& c = s.calibration;
    // Into the server: N x S at its rate x (floor + slope / N); out of it: N x S at its
    // goodput, overlapped chunk by chunk with the pushes, so the pushes bound it.
    const double rate = s.link_gbps * 1e9 / 8;
    const double reference =
        n * Bytes(s) / (rate * std::min(c.link_goodput, c.incast_floor + c.incast_slope / n));
    EXPECT_THAT(OverReference(p->seconds_per_iteration, reference), AboveBoundBy(1.05))
        << n << " workers";
  }
}

// 2 racks of 4 behind 4:1 uplinks (U = B), without the incast: the hierarchy moves one copy of
// each chunk each way across the core and is bound by its PBoxes' links (n + 2 (R - 1) / R) S
// over n B + U = S / B; one PBox for both racks takes rack 1's four copies over one uplink,
// 4 S / B; the ring 2 (N - 1) / N S over min(B, U). bench/topo/topology.py's limits.
TEST(SimulateTest, RacksBehindAnOversubscribedCoreAsTheirLimitsSay) {
  const auto run = [](Scheme scheme) {
    Scenario s = OneGradient(scheme, 8, 64);
    s.racks = 2;
    s.uplink_gbps = 1;
    s.chunk_bytes = 256 << 10;
    auto p = Simulate(s);
    EXPECT_TRUE(p.ok()) << p.status();
    return std::pair{p.ok() ? p->seconds_per_iteration : 0.0, Bytes(s) / WorkerBytesPerSecond(s)};
  };
  const auto [racks, one] = run(Scheme::kPsRacks);
  EXPECT_THAT(OverReference(racks, one), AboveBoundBy(1.05));
  const auto [flat, one_again] = run(Scheme::kPs);
  EXPECT_NEAR(flat, 4 * one, 0.05 * 4 * one);
  const auto [ring, also_one] = run(Scheme::kRing);
  EXPECT_NEAR(ring, 1.75 * one, 1e-3 * one);
}

TEST(SimulateTest, APboxWithTooFewCoresIsBoundByThem) {
  Scenario s = OneGradient(Scheme::kPs, 8, 64);
  s.link_gbps = 400;  // links far faster than one core's 0.5 ns a byte
  s.ps_cores = 1;
  auto p = Simulate(s);
  ASSERT_TRUE(p.ok()) << p.status();
  const double core = s.workers * Bytes(s) * CoreSecondsPerByteIn(s);
  EXPECT_EQ(p->bottleneck, "the PBox's cores");
  EXPECT_THAT(OverReference(p->seconds_per_iteration, core), AboveBoundBy(1.1));
}

TEST(SimulateTest, MergingIdenticalWorkersIntoGroupsLeavesTheTimes) {
  for (Scheme scheme : {Scheme::kPs, Scheme::kRing}) {
    Scenario s = OneGradient(scheme, 48, 16);
    s.max_worker_hosts = 48;
    auto each = Simulate(s);
    s.max_worker_hosts = 5;  // 4 groups of 12 (equal groups: platform.h)
    auto grouped = Simulate(s);
    ASSERT_TRUE(each.ok() && grouped.ok());
    EXPECT_NEAR(grouped->seconds_per_iteration, each->seconds_per_iteration,
                0.01 * each->seconds_per_iteration);
  }
}

TEST(SimulateTest, FourThousandWorkersRunInOneCall) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "under ASan SimGrid runs each actor as a thread (simulate.cc), and the ring's "
                  "8,190 steps of N = 4,096 take minutes; the other builds (TSan included) run it";
#endif
  for (Scheme scheme : {Scheme::kPs, Scheme::kRing, Scheme::kTree}) {
    Scenario s = OneGradient(scheme, 4096, 100);
    s.link_gbps = 100;
    s.ps_cores = 8;
    auto p = Simulate(s, 120);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_GT(p->seconds_per_iteration, 0);
  }
}

TEST(SimulateTest, AScenarioWithoutMeaningIsRefusedNamingTheField) {
  Scenario s = OneGradient(Scheme::kPs, 0, 1);
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("no workers"));
  s = OneGradient(Scheme::kRing, 1, 1);
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("a ring of 1 worker"));
  s = OneGradient(Scheme::kTree, 8, 1);
  s.racks = 2;
  s.uplink_gbps = 1;
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("kTree across racks"));
  s = OneGradient(Scheme::kPs, 2, 1);
  s.tensors.clear();
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("no tensors"));
  s = OneGradient(Scheme::kPs, 2, 1);
  s.calibration.link_goodput = 1.5;
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("link_goodput"));
  // Too many connections to simulate (each an actor): refused before any memory is spent.
  s = OneGradient(Scheme::kPs, 64, 1);
  s.ps_cores = 2048;
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("connections to simulate"));
  s = OneGradient(Scheme::kRing, 4, 1);
  s.push_bytes_ratio = 0.5;
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("push_bytes_ratio"));
  s = OneGradient(Scheme::kPs, 4, 1);
  s.tensors.assign(kMostTensors + 1, Tensor{4, 0});
  EXPECT_THAT(std::string(Simulate(s).status().message()), HasSubstr("tensors"));
}

TEST(ChunksTest, ChunksGoToTheLeastLoadedCoreAndAreMergedPastMaxChunks) {
  Scenario s = OneGradient(Scheme::kPs, 2, 1);
  s.tensors = {{3 << 20, 0}, {1 << 20, 0}};
  s.ps_cores = 2;
  std::vector<SimChunk> chunks = CutChunks(s);
  ASSERT_EQ(chunks.size(), 4u);
  EXPECT_EQ(chunks[0].core, 0u);
  EXPECT_EQ(chunks[1].core, 1u);
  EXPECT_EQ(chunks[3].tensor, 1u);
  s.max_chunks = 2;  // 4 MiB in at most 2 pieces: 2 MiB each
  chunks = CutChunks(s);
  ASSERT_EQ(chunks.size(), 3u);  // 2 + 1 MiB of tensor 0, then tensor 1
  EXPECT_EQ(chunks[0].bytes, 2u << 20);
  EXPECT_EQ(chunks[1].bytes, 1u << 20);
}

// Racks of racks keep phubd's chunk size at any number of racks (a PBox core is three actors,
// not a chunk an actor in every rack), and 8 racks of 1 MiB chunks take the hierarchy's limit.
TEST(ChunksTest, RacksOfRacksKeepPhubdsChunkSize) {
  Scenario s = OneGradient(Scheme::kPsRacks, 1024, 1000);
  s.racks = 64;
  s.uplink_gbps = 8;
  for (const SimChunk& chunk : CutChunks(s)) EXPECT_LE(chunk.bytes, 1u << 20);
  s = OneGradient(Scheme::kPsRacks, 32, 256);
  s.racks = 8;
  s.uplink_gbps = 2;  // 4 workers a rack at 1 Gbit/s: 2:1
  s.ps_cores = 4;
  ASSERT_EQ(CutChunks(s).size(), 256u);
  auto p = Simulate(s);
  ASSERT_TRUE(p.ok()) << p.status();
  // Each rack's PBox link, each way: its 4 workers' S, and (R - 1) / R S twice across the
  // core (the sums of the chunks it is home to, the weights of those homed elsewhere), at
  // 4 B + U; its uplink carries the 2 (R - 1) / R S alone, at U (less busy here). A home
  // waits for the slowest of 8 racks' sums, so the link idles a little: within 12 %.
  const double limit = (4 + 2.0 * 7 / 8) * Bytes(s) / (4 * WorkerBytesPerSecond(s) +
                                                         UplinkBytesPerSecond(s));
  const double uplink = 2.0 * 7 / 8 * Bytes(s) / UplinkBytesPerSecond(s);
  EXPECT_THAT(OverReference(p->seconds_per_iteration, std::max(limit, uplink)),
              AboveBoundBy(1.12));
}

}  // namespace
}  // namespace phub::sim
