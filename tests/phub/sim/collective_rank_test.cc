// Buckets as DDP cuts them, and their allreduces overlapped with backward, against references
// worked out by hand (no SimGrid in them): exchange-only, buckets take what one allreduce
// does; with backward, all but the last bucket's allreduce hide behind it.
#include "phub/sim/collective_rank.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "phub/sim/platform.h"
#include "phub/sim/simulate.h"
#include "phub/sim/tree_actors.h"

namespace phub::sim {
namespace {

constexpr std::uint64_t kMiB = 1 << 20;

Scenario Model(Scheme scheme, std::uint32_t workers, std::vector<std::uint64_t> mib,
               double backward_seconds_each) {
  Scenario s;
  s.scheme = scheme;
  s.workers = workers;
  s.link_gbps = 100;
  for (std::uint64_t m : mib) s.tensors.push_back({m * kMiB, backward_seconds_each});
  return s;
}

double Seconds(const Scenario& s) {
  auto p = Simulate(s);
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? p->seconds_per_iteration : 0;
}

TEST(CutBucketsTest, ABucketClosesOnceFullInBackwardOrder) {
  Scenario s = Model(Scheme::kRing, 2, {10, 10, 30, 5, 5}, 0);
  s.bucket_bytes = 25 * kMiB;
  const std::vector<Bucket> buckets = CutBuckets(s);
  ASSERT_EQ(buckets.size(), 2u);
  EXPECT_EQ(buckets[0].bytes, 50 * kMiB);  // 10 + 10 + 30: closed past 25 by the 30
  EXPECT_EQ(buckets[0].last_tensor, 2u);
  EXPECT_EQ(buckets[1].bytes, 10 * kMiB);  // what is left
  EXPECT_EQ(buckets[1].last_tensor, 4u);
  s.bucket_bytes = 0;
  ASSERT_EQ(CutBuckets(s).size(), 1u);
  EXPECT_EQ(CutBuckets(s)[0].bytes, 60 * kMiB);
}

// Without compute every bucket is ready at once: the ring's buckets, one after another, move
// the same bytes over the same links as one allreduce (exactly, without latency); the tree's
// each pay the pipeline's fill and drain again, at most 2 x depth hops of 2 p / B a bucket.
TEST(CollectiveRankTest, ExchangeOnlyBucketsTakeWhatOneAllreduceTakes) {
  for (Scheme scheme : {Scheme::kRing, Scheme::kTree}) {
    Scenario s = Model(scheme, 8, {16, 16, 16, 16}, 0);
    const double one = Seconds(s);
    s.bucket_bytes = 16 * kMiB;
    const double four = Seconds(s);
    if (scheme == Scheme::kRing) {
      EXPECT_NEAR(four, one, 1e-6 * one);
    } else {
      const double fill = 2.0 * 3 * 2 * s.tree_piece_bytes / WorkerBytesPerSecond(s);  // D = 3
      EXPECT_GE(four, one);
      EXPECT_LE(four, one + 3 * fill);
    }
  }
}

// Eight 8 MiB tensors, each 2 ms of backward, 8 MiB buckets: each bucket's allreduce (the
// ring's 2 (N - 1) / N x 8 MiB / B = 1.2 ms) ends before the next bucket is full, so the
// iteration is forward + backward + the last bucket's allreduce; in one allreduce after
// backward, the whole gradient's. The tree's last bucket: 2 x 8 MiB / B and at most its fill.
TEST(CollectiveRankTest, BackwardHidesEveryBucketsAllreduceButTheLast) {
  const double kForward = 5e-3, kBackward = 2e-3;
  for (Scheme scheme : {Scheme::kRing, Scheme::kTree}) {
    Scenario s = Model(scheme, 8, {8, 8, 8, 8, 8, 8, 8, 8}, kBackward);
    s.forward_seconds = kForward;
    s.bucket_bytes = 8 * kMiB;
    const double b = WorkerBytesPerSecond(s), compute = kForward + 8 * kBackward;
    const double bucketed = Seconds(s);
    s.bucket_bytes = 0;
    const double after_backward = Seconds(s);
    if (scheme == Scheme::kRing) {
      const double last = 2.0 * 7 / 8 * 8 * kMiB / b;
      // (Simulate reports 6 significant digits.)
      EXPECT_NEAR(bucketed, compute + last, 1e-5 * bucketed);
      EXPECT_NEAR(after_backward, compute + 8 * last, 1e-5 * after_backward);
    } else {
      const double last = 2.0 * 8 * kMiB / b;
      const double fill = 2.0 * 3 * 2 * s.tree_piece_bytes / b;  // D = 3 for 8 ranks
      EXPECT_GT(bucketed, compute + last);
      EXPECT_LT(bucketed, compute + last + fill);
      EXPECT_GT(after_backward, compute + 8 * last);
      EXPECT_LT(after_backward, compute + 8 * last + fill);
    }
  }
}

}  // namespace
}  // namespace phub::sim
