// Shard's part in recovery (shard_recovery.cc, docs/design.md "Recovery"), end to end through
// real connections on both cores of the harness's job (shard_cluster.h): a worker lost in the
// middle of an iteration, forgotten (ForgetWorker: where it stands), expected back
// (ExpectRejoin) and replaying the iteration in flight until the weights are, bit for bit, those
// of a run without the failure; what is refused around a rejoin; the copies a checkpoint is
// written from (kSnapshot); a job resumed from a checkpoint (JobSpec::resume).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "phub/server/shard/shard.h"
#include "tests/phub/server/shard/shard_cluster.h"
#include "tests/phub/server/shard/shard_harness.h"
#include "tests/reference/optimizer_reference.h"

namespace phub::server::shard_test {
namespace {

using ::testing::HasSubstr;
using transport::Op;
using transport::WireHeader;

kernels::OptimizerConfig Optimizer(kernels::OptimizerKind kind) {
  kernels::OptimizerConfig c;
  c.kind = kind;
  c.lr = kind == kernels::OptimizerKind::kAdam ? 0.01f : 0.1f;
  c.weight_decay = 0.01f;
  return c;
}


// got within 1e-5 relative (1e-6 absolute floor) of want: far above a few float32 roundings per
// step, far below any wrong term (shard_step_test.cc says why).
void ExpectNear(std::span<const float> got, std::span<const double> want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size() && reported < 3; ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= 1e-6 + 1e-5 * std::abs(want[i]))) {
      ++reported;
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", reference " << want[i];
    }
  }
}

// Bitwise equality of every chunk of two snapshots (weights, previous, state, iteration).
void ExpectSameState(const std::map<std::uint32_t, ChunkSnapshot>& got,
                     const std::map<std::uint32_t, ChunkSnapshot>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [k, w] : want) {
    const ChunkSnapshot& g = got.at(k);
    EXPECT_EQ(g.iteration, w.iteration) << "chunk " << k;
    EXPECT_TRUE(SameBits(g.weights, w.weights)) << "weights of chunk " << k;
    EXPECT_TRUE(SameBits(g.previous, w.previous)) << "previous weights of chunk " << k;
    ASSERT_EQ(g.state.size(), w.state.size()) << "chunk " << k;
    for (std::size_t s = 0; s < w.state.size(); ++s) {
      EXPECT_TRUE(SameBits(g.state[s], w.state[s])) << "state " << s << " of chunk " << k;
    }
  }
}

// Nothing more arrives on `socket` (checked last, once everything expected was read).
void ExpectNothingMore(RawSocket& socket, const std::string& who) {
  WireHeader header;
  std::vector<std::byte> payload;
  const RawSocket::Read read = socket.ReadWire(header, payload, Millis(100));
  EXPECT_EQ(read, RawSocket::Read::kTimeout) << who << " got " << OpName(header.op) << " of chunk "
                                             << header.chunk << " iteration " << header.iteration;
}

// The test's own account of who pushed what, to say independently of the shard where a rank
// stands: a chunk's completed iterations are those every rank pushed, in order from 1.
class Ledger {
 public:
  void Pushed(std::uint32_t chunk, std::uint64_t iteration, std::uint32_t rank) {
    ranks_[{chunk, iteration}].insert(rank);
  }
  bool Has(std::uint32_t chunk, std::uint64_t iteration, std::uint32_t rank) const {
    auto it = ranks_.find({chunk, iteration});
    return it != ranks_.end() && it->second.count(rank) > 0;
  }
  std::uint64_t Completed(std::uint32_t chunk) const {
    std::uint64_t done = 0;
    while (true) {
      auto it = ranks_.find({chunk, done + 1});
      if (it == ranks_.end() || it->second.size() != kWorld) return done;
      ++done;
    }
  }
  // Over `chunks`: the fewest iterations that hold `rank`'s copy (completed ones, plus the next
  // if its copy of it is in).
  std::uint64_t Contributed(const std::vector<std::uint32_t>& chunks, std::uint32_t rank) const {
    std::uint64_t least = UINT64_MAX;
    for (std::uint32_t k : chunks) {
      const std::uint64_t done = Completed(k);
      least = std::min(least, done + (Has(k, done + 1, rank) ? 1 : 0));
    }
    return least;
  }

 private:
  std::map<std::pair<std::uint32_t, std::uint64_t>, std::set<std::uint32_t>> ranks_;
};

// ---- A worker lost mid-iteration, and back ----

// The story of every test below (momentum, keep_previous). Core 0 owns chunks 0 and 3, core 1
// owns 1, 2, 4 and 5; chunk 5 is tensor c alone, so it can lag an iteration behind the others.
//   iteration 1: every rank pushes every chunk.
//   iteration 2: likewise, except rank 2's copy of chunk 5 (chunk 5 stays at 1).
//   iteration 3, in flight: chunk 0 and 2 get every copy (they complete 3); chunk 3 and 1 get
//     ranks 0 and 1; chunk 4 ranks 0 and 2.
//   rank 1 is lost then, having read none of the WEIGHTS of 3.
// Where rank 1 stands: core 0: chunk 0 holds 3 of its copies, chunk 3 2 + 1 (its copy of 3 is
// in): 3. Core 1: chunk 1: 3, chunk 2: 3, chunk 4: 2, chunk 5: 1 + 1: 2. It rejoins at R = 2:
// chunk 3, 1 and 4 send their current weights (at 2), 0 and 2 their previous (they are at 3),
// chunk 5 its broadcast when rank 2's late copy completes it.
class ShardRejoinTest : public ::testing::Test {
 protected:
  static constexpr std::uint32_t kLost = 1;
  static constexpr std::uint64_t kR = 2;  // where kLost rejoins (computed again below)
  static constexpr std::uint64_t kIterations = 4;

  ShardRejoinTest() : job_(Job()), cluster_(job_) {
    std::mt19937 rng(4242);
    initial_ = RandomTensors(rng, -1.0f, 1.0f);
    grads_.resize(kIterations + 1);
    for (std::uint64_t it = 1; it <= kIterations; ++it) {
      for (std::uint32_t r = 0; r < kWorld; ++r)
        grads_[it].push_back(RandomTensors(rng, -1.0f, 1.0f));
    }
    // The float64 reference of the uninterrupted run, per tensor, after each iteration.
    const testing::RefConfig config = ReferenceConfig(job_->optimizer);
    std::vector<std::vector<double>> w, v(kModel.size()), s(kModel.size());
    for (const auto& t : initial_) w.emplace_back(t.begin(), t.end());
    reference_.push_back(w);
    for (std::uint64_t it = 1; it <= kIterations; ++it) {
      for (std::size_t t = 0; t < kModel.size(); ++t) {
        std::vector<std::vector<double>> g;
        for (std::uint32_t r = 0; r < kWorld; ++r)
          g.emplace_back(grads_[it][r][t].begin(), grads_[it][r][t].end());
        testing::RefStep(config, g, w[t], v[t], s[t], it);
      }
      reference_.push_back(w);
    }
  }

  static std::shared_ptr<JobSpec> Job() {
    auto job = MakeJob(Optimizer(kernels::OptimizerKind::kMomentum));
    job->keep_previous = true;
    return job;
  }
  const keys::KeyTable& table() const { return job_->table; }
  std::vector<std::uint32_t> ChunksOf(std::uint32_t core) const {
    return table().chunks_on_core(core);
  }

  // The same job and pushes without a failure: the WEIGHTS of every iteration (every rank got
  // the same bits) and every chunk's state at the end.
  void RunUninterrupted() {
    ShardCluster clean(Job());
    ASSERT_NO_FATAL_FAILURE(clean.AttachAll());
    ASSERT_NO_FATAL_FAILURE(clean.Init(initial_));
    clean_.assign(kIterations + 1, {});
    for (std::uint64_t it = 1; it <= kIterations; ++it) {
      const std::vector<Weights> got = clean.Iterate(it, grads_[it]);
      for (std::uint32_t r = 0; r < kWorld; ++r) {
        ASSERT_EQ(got[r].size(), table().chunks().size()) << "rank " << r << ", iteration " << it;
        for (const auto& [k, values] : got[r]) ASSERT_TRUE(SameBits(values, got[0].at(k)));
      }
      clean_[it] = got[0];
    }
    clean_state_ = clean.Snapshot();
  }

  void Push(std::uint32_t rank, std::uint32_t chunk, std::uint64_t iteration) {
    ASSERT_TRUE(cluster_.Push(rank, chunk, iteration, grads_[iteration][rank]));
    ledger_.Pushed(chunk, iteration, rank);
  }

  // WEIGHTS(k, iteration) for `rank` of `chunks`, equal bit for bit to the uninterrupted run's
  // and close to the float64 reference.
  void ExpectWeights(std::uint32_t rank, const std::vector<std::uint32_t>& chunks,
                     std::uint64_t iteration) {
    const Weights got = cluster_.Read(rank, chunks, iteration);
    ASSERT_EQ(got.size(), chunks.size()) << "rank " << rank << ", iteration " << iteration;
    for (const auto& [k, values] : got) {
      const keys::Chunk& c = table().chunks()[k];
      EXPECT_TRUE(SameBits(values, clean_[iteration].at(k)))
          << "rank " << rank << ": WEIGHTS(" << k << ", " << iteration
          << ") differ from the uninterrupted run's";
      ExpectNear(
          values,
          std::span<const double>(reference_[iteration][c.tensor]).subspan(c.offset, c.elements),
          "rank " + std::to_string(rank) + ": WEIGHTS(" + std::to_string(k) + ", " +
              std::to_string(iteration) + ")");
    }
  }

  // Iterations 1 to 3 as the story says, then rank kLost's connections close; both cores
  // report it lost.
  void RunToTheLoss() {
    ASSERT_NO_FATAL_FAILURE(RunUninterrupted());
    ASSERT_NO_FATAL_FAILURE(cluster_.AttachAll());
    ASSERT_NO_FATAL_FAILURE(cluster_.Init(initial_));
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      for (std::uint32_t k : cluster_.AllChunks()) ASSERT_NO_FATAL_FAILURE(Push(r, k, 1));
    }
    for (std::uint32_t r = 0; r < kWorld; ++r) ExpectWeights(r, cluster_.AllChunks(), 1);
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      for (std::uint32_t k : cluster_.AllChunks()) {
        if (k == 5 && r == 2) continue;  // late
        ASSERT_NO_FATAL_FAILURE(Push(r, k, 2));
      }
    }
    for (std::uint32_t r = 0; r < kWorld; ++r) ExpectWeights(r, {0, 1, 2, 3, 4}, 2);
    const std::vector<std::pair<std::uint32_t, std::vector<std::uint32_t>>> in_flight = {
        {0, {0, 1, 2}}, {3, {0, 1}}, {1, {0, 1}}, {2, {0, 1, 2}}, {4, {0, 2}}};
    for (const auto& [k, ranks] : in_flight) {
      for (std::uint32_t r : ranks) ASSERT_NO_FATAL_FAILURE(Push(r, k, 3));
    }
    ASSERT_TRUE(cluster_.AllReceived());  // every copy is in before the connections go
    for (std::uint32_t r : {0u, 2u}) ExpectWeights(r, {0, 2}, 3);
    for (std::uint32_t c = 0; c < kCores; ++c) cluster_.socket(kLost, c).Close();
    for (std::uint32_t c = 0; c < kCores; ++c) {
      const auto lost = cluster_.core(c).AwaitEvent(ShardEvent::Kind::kWorkerLost);
      ASSERT_TRUE(lost) << "core " << c << " did not report rank " << kLost << " lost";
      ASSERT_EQ(lost->rank, kLost);
    }
  }

  void ForgetOnEveryCore() {
    points_.clear();
    for (std::uint32_t c = 0; c < kCores; ++c) {
      cluster_.core(c).OnLoop([&](Shard& s) { points_.push_back(s.ForgetWorker(kLost)); });
    }
  }

  // ExpectRejoin(kLost, R) on every core, then kLost attaches again (a new connection to each)
  // and reads the WEIGHTS of R of every chunk but 5 (which is one behind); rank 2's late copy
  // then completes chunk 5, whose broadcast carries them to every rank, kLost included.
  void Rejoin() {
    ASSERT_NO_FATAL_FAILURE(RunToTheLoss());
    ForgetOnEveryCore();
    for (std::uint32_t c = 0; c < kCores; ++c) {
      cluster_.core(c).OnLoop([&](Shard& s) { s.ExpectRejoin(kLost, kR); });
    }
    cluster_.Attach(kLost);
    ASSERT_NO_FATAL_FAILURE(ExpectWeights(kLost, {0, 1, 2, 3, 4}, kR));
    ASSERT_NO_FATAL_FAILURE(Push(2, 5, 2));
    for (std::uint32_t r = 0; r < kWorld; ++r) ASSERT_NO_FATAL_FAILURE(ExpectWeights(r, {5}, 2));
  }

  std::shared_ptr<JobSpec> job_;
  ShardCluster cluster_;
  Tensors initial_;
  std::vector<std::vector<Tensors>> grads_;                  // [iteration][rank]
  std::vector<std::vector<std::vector<double>>> reference_;  // [iteration][tensor]
  std::vector<Weights> clean_;                               // [iteration]: chunk -> weights
  std::map<std::uint32_t, ChunkSnapshot> clean_state_;
  Ledger ledger_;
  std::vector<RejoinPoint> points_;  // by core, ForgetOnEveryCore's
};

// ForgetWorker returns, per core, the fewest iterations that hold the lost worker's copy (the
// test's ledger says so on its own: 3 on core 0, 2 on core 1) and no chunk without weights;
// asked again it says the same; a rank outside the job gets the empty answer.
TEST_F(ShardRejoinTest, ForgetWorkerSaysWhereTheLostWorkerStandsOnEachCore) {
  ASSERT_NO_FATAL_FAILURE(RunToTheLoss());
  ForgetOnEveryCore();
  ASSERT_EQ(points_.size(), kCores);
  for (std::uint32_t c = 0; c < kCores; ++c) {
    EXPECT_EQ(points_[c].contributed, ledger_.Contributed(ChunksOf(c), kLost)) << "core " << c;
    EXPECT_EQ(points_[c].uninitialized, 0u) << "core " << c;
  }
  EXPECT_EQ(points_[0].contributed, 3u) << "the story no longer says what the test expects";
  EXPECT_EQ(points_[1].contributed, kR) << "the story no longer says what the test expects";
  RejoinPoint again, stranger;
  cluster_.core(1).OnLoop([&](Shard& s) {
    again = s.ForgetWorker(kLost);
    stranger = s.ForgetWorker(kWorld);
  });
  EXPECT_EQ(again.contributed, points_[1].contributed);
  EXPECT_EQ(stranger.contributed, UINT64_MAX);
  EXPECT_EQ(stranger.uninitialized, 0u);
}

// Before every chunk has its initial weights, ForgetWorker counts those without.
TEST_F(ShardRejoinTest, ForgetWorkerCountsChunksWithoutInitialWeights) {
  ASSERT_NO_FATAL_FAILURE(cluster_.AttachAll());
  const keys::Chunk& first = table().chunks()[ChunksOf(1).front()];
  ASSERT_TRUE(SendChunk(cluster_.socket(0, 1), Op::kInit, 0, first, 0, ChunkOf(initial_, first)));
  ASSERT_TRUE(
      cluster_.core(1).Eventually([&](Shard& s) { return s.stats().bytes_in == first.bytes(); }));
  RejoinPoint point;
  cluster_.core(1).OnLoop([&](Shard& s) { point = s.ForgetWorker(2); });
  EXPECT_EQ(point.uninitialized, ChunksOf(1).size() - 1);
  EXPECT_EQ(point.contributed, 0u);
}

// The rejoiner, once attached, gets every chunk's weights labelled R (2), each equal bit for bit
// to what the uninterrupted run sent for iteration 2 (and to the float64 reference): current
// weights from chunks at 2, previous ones from chunks at 3, and chunk 5's (at 1) with the
// broadcast that completes it (Rejoin() checks all of it).
TEST_F(ShardRejoinTest, TheRejoinerGetsEveryChunksWeightsOfTheRejoinIteration) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  for (std::uint32_t c = 0; c < kCores; ++c) {
    const auto all = cluster_.core(c).events();
    // Attaching again makes the core whole again.
    EXPECT_EQ(CountEvents(all, ShardEvent::Kind::kAllAttached), 2u) << "core " << c;
  }
}

// Replaying iteration 3 (its pushes of chunks that completed 3 answered with their WEIGHTS of 3,
// of chunks that hold its copy dropped, the others counted), then the survivors' missing copies,
// then iteration 4 from everyone: every rank's WEIGHTS of 3 and 4 and every chunk's state (weights,
// previous, velocity) equal bit for bit those of the run without the failure. Nothing more
// arrives for anyone.
TEST_F(ShardRejoinTest, ReplayingTheIterationInFlightEndsBitwiseWhereAnUninterruptedRunDoes) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  for (std::uint32_t k : {0u, 3u, 1u, 2u, 4u, 5u}) ASSERT_NO_FATAL_FAILURE(Push(kLost, k, 3));
  // The replays are in before the survivors' copies (the other order is
  // AChunkHoldingTheLostCopyThatCompletesAfterTheRejoinAnswersOnce).
  ASSERT_TRUE(cluster_.AllReceived());
  for (const auto& [rank, chunk] :
       std::vector<std::pair<std::uint32_t, std::uint32_t>>{{2, 3}, {2, 1}, {2, 5}, {0, 5}}) {
    ASSERT_NO_FATAL_FAILURE(Push(rank, chunk, 3));
  }
  // The survivors got 0 and 2 before the loss: an answer to a replay would be read here first.
  for (std::uint32_t r : {0u, 2u}) ASSERT_NO_FATAL_FAILURE(ExpectWeights(r, {1, 3, 4, 5}, 3));
  ASSERT_NO_FATAL_FAILURE(ExpectWeights(kLost, cluster_.AllChunks(), 3));
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    for (std::uint32_t k : cluster_.AllChunks()) ASSERT_NO_FATAL_FAILURE(Push(r, k, 4));
  }
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_NO_FATAL_FAILURE(ExpectWeights(r, cluster_.AllChunks(), 4));
  }
  ExpectSameState(cluster_.Snapshot(), clean_state_);
  for (std::uint32_t c = 0; c < kCores; ++c) {
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      ExpectNothingMore(cluster_.socket(r, c),
                        "rank " + std::to_string(r) + " on core " + std::to_string(c));
    }
    EXPECT_EQ(cluster_.core(c).stats().aggregations, ChunksOf(c).size() * kIterations);
  }
}

// A replayed push of a chunk that already completed that iteration is answered with the chunk's
// WEIGHTS of it to the rejoiner alone: the survivors' next message on that core is the broadcast
// of the next chunk to complete, not a copy of the answer.
TEST_F(ShardRejoinTest, AReplayOfACompletedChunkIsAnsweredToTheRejoinerAlone) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  // Core 0: chunk 0 completed 3; chunk 3 holds the rejoiner's copy and waits for rank 2's.
  ASSERT_NO_FATAL_FAILURE(Push(kLost, 0, 3));
  ASSERT_NO_FATAL_FAILURE(ExpectWeights(kLost, {0}, 3));
  ASSERT_NO_FATAL_FAILURE(Push(kLost, 3, 3));
  ASSERT_TRUE(cluster_.AllReceived());  // the replay first (see the DISABLED test below)
  ASSERT_NO_FATAL_FAILURE(Push(2, 3, 3));
  for (std::uint32_t r = 0; r < kWorld; ++r) ASSERT_NO_FATAL_FAILURE(ExpectWeights(r, {3}, 3));
  // Core 1: chunk 2 completed 3; chunk 4 waits for the rejoiner's copy only.
  ASSERT_NO_FATAL_FAILURE(Push(kLost, 2, 3));
  ASSERT_NO_FATAL_FAILURE(ExpectWeights(kLost, {2}, 3));
  ASSERT_NO_FATAL_FAILURE(Push(kLost, 4, 3));
  for (std::uint32_t r = 0; r < kWorld; ++r) ASSERT_NO_FATAL_FAILURE(ExpectWeights(r, {4}, 3));
  for (std::uint32_t r : {0u, 2u}) {
    for (std::uint32_t c = 0; c < kCores; ++c) {
      ExpectNothingMore(cluster_.socket(r, c),
                        "survivor " + std::to_string(r) + " on core " + std::to_string(c));
    }
  }
}

// ---- What stays refused around a rejoin ----

// A rank that attached before and was forgotten attaches again only after ExpectRejoin: without
// it the ATTACH is refused (kBadPeer) with a reason naming the missing rejoin; with it, the same
// rank attaches and gets its weights.
TEST_F(ShardRejoinTest, AnAttachOfARankSeenBeforeIsRefusedWithoutRejoining) {
  ASSERT_NO_FATAL_FAILURE(RunToTheLoss());
  ForgetOnEveryCore();
  RawSocket early = Attached(cluster_.core(0), kLost);
  ASSERT_TRUE(early.WaitClosed(kStep)) << "the shard took rank " << kLost << " back unasked";
  const auto bad = cluster_.core(0).AwaitEvent(ShardEvent::Kind::kBadPeer);
  ASSERT_TRUE(bad) << "no kBadPeer";
  EXPECT_THAT(bad->reason, HasSubstr("rank 1 attaches to core 0 again without rejoining"));
  cluster_.core(0).OnLoop([&](Shard& s) { s.ExpectRejoin(kLost, kR); });
  RawSocket back = Attached(cluster_.core(0), kLost);
  const Weights got = ReadWeights(back, kLost, ChunksOf(0), kR, table());
  EXPECT_EQ(got.size(), ChunksOf(0).size());
}

// A lost rank holds its place until the control plane forgets it: an ATTACH of it is refused as
// already attached.
TEST_F(ShardRejoinTest, ALostRankThatWasNotForgottenCannotAttachAgain) {
  ASSERT_NO_FATAL_FAILURE(RunToTheLoss());
  RawSocket again = Attached(cluster_.core(1), kLost);
  ASSERT_TRUE(again.WaitClosed(kStep));
  const auto bad = cluster_.core(1).AwaitEvent(ShardEvent::Kind::kBadPeer);
  ASSERT_TRUE(bad) << "no kBadPeer";
  EXPECT_THAT(bad->reason, HasSubstr("rank 1 is already attached to core 1"));
}

// The rejoiner replays iteration R + 1 only: its push of R + 2 to a chunk still at R is refused
// as for anyone (its connection closes, reported with the reason).
TEST_F(ShardRejoinTest, ARejoinersPushPastTheReplayedIterationIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  ASSERT_TRUE(cluster_.PushRefused(kLost, 4, kR + 2, grads_[kR + 1][kLost]));
  ASSERT_TRUE(cluster_.socket(kLost, 1).WaitClosed(kStep)) << "the push of R + 2 was taken";
  const auto lost =
      AwaitEventSaying(cluster_.core(1), ShardEvent::Kind::kWorkerLost,
                       "PUSH of chunk 4 for iteration 4; the chunk expects iteration 3");
  ASSERT_TRUE(lost) << "no kWorkerLost with the refusal";
  EXPECT_EQ(lost->rank, kLost);
}

// Once the replayed iteration is over, a second push of the next one is refused as for anyone.
TEST_F(ShardRejoinTest, ARejoinersSecondPushAfterTheReplayIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  ASSERT_NO_FATAL_FAILURE(Push(kLost, 0, 3));  // completed: answered
  ASSERT_NO_FATAL_FAILURE(ExpectWeights(kLost, {0}, 3));
  ASSERT_NO_FATAL_FAILURE(Push(kLost, 0, 4));
  ASSERT_TRUE(cluster_.PushRefused(kLost, 0, 4, grads_[4][kLost]));
  ASSERT_TRUE(cluster_.socket(kLost, 0).WaitClosed(kStep)) << "the second push of 4 was taken";
  const auto lost = AwaitEventSaying(cluster_.core(0), ShardEvent::Kind::kWorkerLost,
                                     "second PUSH of chunk 0 in iteration 4");
  ASSERT_TRUE(lost) << "no kWorkerLost with the refusal";
  EXPECT_EQ(lost->rank, kLost);
}

// The replay window is the rejoiner's alone: a survivor's second push of a chunk that holds its
// copy (chunk 3, at 2), or its push of an iteration the chunk completed (chunk 2, at 3), is still
// refused, each closing that survivor's connection with the usual reason.
TEST_F(ShardRejoinTest, ASurvivorsDuplicatePushIsStillRefused) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  ASSERT_TRUE(cluster_.PushRefused(0, 3, 3, grads_[3][0]));
  ASSERT_TRUE(cluster_.socket(0, 0).WaitClosed(kStep)) << "rank 0's second push of chunk 3 taken";
  const auto second = AwaitEventSaying(cluster_.core(0), ShardEvent::Kind::kWorkerLost,
                                       "second PUSH of chunk 3 in iteration 3");
  ASSERT_TRUE(second) << "no kWorkerLost with the refusal";
  EXPECT_EQ(second->rank, 0);
  ASSERT_TRUE(cluster_.PushRefused(2, 2, 3, grads_[3][2]));
  ASSERT_TRUE(cluster_.socket(2, 1).WaitClosed(kStep)) << "rank 2's push of a completed 3 taken";
  const auto stale =
      AwaitEventSaying(cluster_.core(1), ShardEvent::Kind::kWorkerLost,
                       "PUSH of chunk 2 for iteration 3; the chunk expects iteration 4");
  ASSERT_TRUE(stale) << "no kWorkerLost with the refusal";
  EXPECT_EQ(stale->rank, 2);
}

// The rejoiner resumes at R and replays R + 1: a push of R itself (an iteration it has the
// weights of) is outside the window and is refused like any stale push (found by this test:
// the window once had no lower bound, and the push was answered with WEIGHTS(4, 2) again).
TEST_F(ShardRejoinTest, ARejoinersPushOfTheResumeIterationIsRefused) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  ASSERT_TRUE(cluster_.PushRefused(kLost, 4, kR, grads_[kR][kLost]));
  WireHeader header;
  std::vector<std::byte> payload;
  const RawSocket::Read read = cluster_.socket(kLost, 1).ReadWire(header, payload, kStep);
  EXPECT_EQ(read, RawSocket::Read::kClosed)
      << "the push of R was taken: the rejoiner got " << OpName(header.op) << " of chunk "
      << header.chunk << " iteration " << header.iteration;
}

// A chunk that holds the lost worker's copy of R + 1 (chunk 1: ranks 0 and 1 pushed 3) may
// complete R + 1 after the rejoiner attached and before its replayed push of it arrives (here
// rank 2's copy comes first). The rejoiner gets WEIGHTS(1, 3) once, when its replay arrives
// (found by this test: the broadcast used to reach it before it had asked, which PsClient
// refuses, and its replay was then answered a second time).
TEST_F(ShardRejoinTest, AChunkHoldingTheLostCopyThatCompletesAfterTheRejoinAnswersOnce) {
  ASSERT_NO_FATAL_FAILURE(Rejoin());
  ASSERT_NO_FATAL_FAILURE(Push(2, 1, 3));  // completes chunk 1's iteration 3
  for (std::uint32_t r : {0u, 2u}) ASSERT_NO_FATAL_FAILURE(ExpectWeights(r, {1}, 3));
  ASSERT_NO_FATAL_FAILURE(Push(kLost, 1, 3));  // the replay
  ASSERT_NO_FATAL_FAILURE(ExpectWeights(kLost, {1}, 3));
  ExpectNothingMore(cluster_.socket(kLost, 1), "the rejoiner on core 1");
}

// ---- Checkpoint copies (kSnapshot) ----

// checkpoint_every = 2 (momentum): nothing after iteration 1; once every chunk of a core has
// completed 2, the core reports kSnapshot of iteration 2 holding each of its chunks once, at
// iteration 2, with the weights every worker got as WEIGHTS(k, 2) and the one state array the
// shard holds (its velocity, which is the float64 reference's too), copied in pause_ms >= 0.
// Nothing after 3; a second kSnapshot at 4, the first one's copies unchanged by then.
TEST(ShardSnapshotTest, EveryChunkIsCopiedAsItCompletesAMultipleOfCheckpointEvery) {
  auto job = MakeJob(Optimizer(kernels::OptimizerKind::kMomentum));
  job->checkpoint_every = 2;
  ShardCluster cluster(job);
  std::mt19937 rng(99);
  const Tensors initial = RandomTensors(rng, -1.0f, 1.0f);
  ASSERT_NO_FATAL_FAILURE(cluster.AttachAll());
  ASSERT_NO_FATAL_FAILURE(cluster.Init(initial));
  const testing::RefConfig config = ReferenceConfig(job->optimizer);
  std::vector<std::vector<double>> ref_w, ref_v(kModel.size()), ref_s(kModel.size());
  for (const auto& t : initial) ref_w.emplace_back(t.begin(), t.end());

  std::vector<std::optional<ShardEvent>> first(kCores);
  std::map<std::uint32_t, ChunkSnapshot> at_two;
  for (std::uint64_t it = 1; it <= 4; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    std::vector<Tensors> grads;
    for (std::uint32_t r = 0; r < kWorld; ++r) grads.push_back(RandomTensors(rng, -1.0f, 1.0f));
    for (std::size_t t = 0; t < kModel.size(); ++t) {
      std::vector<std::vector<double>> g;
      for (std::uint32_t r = 0; r < kWorld; ++r)
        g.emplace_back(grads[r][t].begin(), grads[r][t].end());
      testing::RefStep(config, g, ref_w[t], ref_v[t], ref_s[t], it);
    }
    const std::vector<Weights> got = cluster.Iterate(it, grads);
    ASSERT_EQ(got[0].size(), job->table.chunks().size());
    // The sink runs before the broadcast of the chunk that completes the set: by now every
    // kSnapshot of this iteration has been reported.
    for (std::uint32_t c = 0; c < kCores; ++c) {
      const auto events = cluster.core(c).events();
      ASSERT_EQ(CountEvents(events, ShardEvent::Kind::kSnapshot), it / 2) << "core " << c;
    }
    if (it != 2) continue;
    at_two = cluster.Snapshot();
    for (std::uint32_t c = 0; c < kCores; ++c) {
      first[c] = cluster.core(c).AwaitEvent(ShardEvent::Kind::kSnapshot);
      ASSERT_TRUE(first[c]);
      const ShardEvent& e = *first[c];
      EXPECT_EQ(e.core, c);
      EXPECT_EQ(e.iteration, 2u);
      EXPECT_GE(e.pause_ms, 0.0);
      ASSERT_TRUE(e.chunks);
      std::multiset<std::uint32_t> ids;
      for (const ChunkSnapshot& s : *e.chunks) {
        ids.insert(s.chunk);
        const keys::Chunk& chunk = job->table.chunks()[s.chunk];
        EXPECT_EQ(s.iteration, 2u) << "chunk " << s.chunk;
        EXPECT_TRUE(SameBits(s.weights, got[0].at(s.chunk))) << "chunk " << s.chunk;
        EXPECT_TRUE(SameBits(s.weights, at_two.at(s.chunk).weights)) << "chunk " << s.chunk;
        ASSERT_EQ(s.state.size(), 1u) << "chunk " << s.chunk;
        EXPECT_TRUE(SameBits(s.state[0], at_two.at(s.chunk).state[0])) << "chunk " << s.chunk;
        ExpectNear(
            s.state[0],
            std::span<const double>(ref_v[chunk.tensor]).subspan(chunk.offset, chunk.elements),
            "velocity of chunk " + std::to_string(s.chunk));
      }
      const auto& mine = job->table.chunks_on_core(c);
      EXPECT_EQ(ids, std::multiset<std::uint32_t>(mine.begin(), mine.end())) << "core " << c;
    }
  }
  for (std::uint32_t c = 0; c < kCores; ++c) {
    std::vector<ShardEvent> snapshots;
    for (const ShardEvent& e : cluster.core(c).events()) {
      if (e.kind == ShardEvent::Kind::kSnapshot) snapshots.push_back(e);
    }
    ASSERT_EQ(snapshots.size(), 2u);
    EXPECT_EQ(snapshots[1].iteration, 4u);
    ASSERT_TRUE(snapshots[1].chunks);
    EXPECT_EQ(snapshots[1].chunks->size(), job->table.chunks_on_core(c).size());
    for (const ChunkSnapshot& s : *snapshots[1].chunks) EXPECT_EQ(s.iteration, 4u);
    for (const ChunkSnapshot& s : *first[c]->chunks) {
      EXPECT_TRUE(SameBits(s.weights, at_two.at(s.chunk).weights))
          << "the copy of chunk " << s.chunk << " changed after iteration 2";
    }
  }
}

// ---- A job resumed from a checkpoint ----

struct ResumeCase {
  std::string name;
  kernels::OptimizerKind kind;
};
std::ostream& operator<<(std::ostream& out, const ResumeCase& c) { return out << c.name; }

class ShardResumeTest : public ::testing::TestWithParam<ResumeCase> {};

// A JobSnapshot made here: R = 5; chunks 0, 2 and 5 at 6 with their previous weights (they
// completed 6 before the checkpoint), the others at 5; random weights and optimizer state
// (Adam's second moment positive). With JobSpec::resume (and keep_previous), each worker gets,
// as it attaches and before the others have, WEIGHTS labelled 5 of every chunk: the snapshot's
// weights of a chunk at 5, its previous weights of a chunk at 6. Then every rank pushes 6: a
// chunk at 5 steps from the snapshot's weights and state (the float64 reference, Adam's step
// count going on from 5, not from 0), a chunk at 6 answers each rank with its weights of 6 (the
// snapshot's, bit for bit); iteration 7 steps every chunk from there.
TEST_P(ShardResumeTest, WorkersResumeFromTheSnapshotsWeightsAndStepOnFromItsState) {
  const kernels::OptimizerKind kind = GetParam().kind;
  const bool adam = kind == kernels::OptimizerKind::kAdam;
  constexpr std::uint64_t kResume = 5;
  const std::set<std::uint32_t> ahead = {0, 2, 5};
  auto job = MakeJob(Optimizer(kind));
  const keys::KeyTable& table = job->table;
  std::mt19937 rng(777 + static_cast<int>(kind));
  auto snapshot = std::make_shared<JobSnapshot>();
  snapshot->tensors = kModel;
  snapshot->chunk_bytes = kChunkBytes;
  snapshot->world_size = kWorld;
  snapshot->optimizer = job->optimizer;
  auto random = [&](std::size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  for (const keys::Chunk& c : table.chunks()) {
    ChunkSnapshot& s = snapshot->chunks.emplace_back();
    s.chunk = c.id;
    s.iteration = ahead.count(c.id) ? kResume + 1 : kResume;
    s.weights = random(c.elements, -1.0f, 1.0f);
    if (ahead.count(c.id)) s.previous = random(c.elements, -1.0f, 1.0f);
    if (adam) {
      s.state.push_back(random(c.elements, -0.1f, 0.1f));
      s.state.push_back(random(c.elements, 1e-3f, 1e-2f));
    } else {
      s.state.push_back(random(c.elements, -0.5f, 0.5f));
    }
  }
  ASSERT_TRUE(ValidateSnapshot(*snapshot).ok()) << ValidateSnapshot(*snapshot);
  job->keep_previous = true;
  job->resume = snapshot;
  job->resume_iteration = kResume;
  ShardCluster cluster(job);

  // Each worker as it attaches: every chunk's weights of 5.
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    cluster.Attach(r);
    const Weights got = cluster.Read(r, cluster.AllChunks(), kResume);
    ASSERT_EQ(got.size(), table.chunks().size()) << "rank " << r;
    for (const auto& [k, values] : got) {
      const ChunkSnapshot& s = snapshot->chunks[k];
      EXPECT_TRUE(SameBits(values, ahead.count(k) ? s.previous : s.weights))
          << "rank " << r << ": WEIGHTS(" << k << ", 5) are not the snapshot's "
          << (ahead.count(k) ? "previous weights" : "weights");
    }
  }
  for (std::uint32_t c = 0; c < kCores; ++c) {
    ASSERT_TRUE(cluster.core(c).AwaitEvent(ShardEvent::Kind::kAllAttached));
  }

  // The float64 reference, per chunk, from the snapshot.
  const testing::RefConfig config = ReferenceConfig(job->optimizer);
  std::map<std::uint32_t, std::vector<double>> w, v, s;
  for (const ChunkSnapshot& c : snapshot->chunks) {
    w[c.chunk].assign(c.weights.begin(), c.weights.end());
    v[c.chunk].assign(c.state[0].begin(), c.state[0].end());
    if (adam) s[c.chunk].assign(c.state[1].begin(), c.state[1].end());
  }
  const Tensors signs = RandomTensors(rng, -1.0f, 1.0f);
  for (std::uint64_t it = kResume + 1; it <= kResume + 2; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    std::vector<Tensors> grads;
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      Tensors g = RandomTensors(rng, -1.0f, 1.0f);
      if (adam) {  // one sign per element across workers (shard_step_test.cc says why)
        for (std::size_t t = 0; t < g.size(); ++t) {
          for (std::size_t i = 0; i < g[t].size(); ++i) {
            g[t][i] = std::copysign(0.25f + 0.375f * (g[t][i] + 1.0f), signs[t][i]);
          }
        }
      }
      grads.push_back(std::move(g));
    }
    for (const keys::Chunk& c : table.chunks()) {
      if (it == kResume + 1 && ahead.count(c.id)) continue;  // it completed 6 already
      std::vector<std::vector<double>> g;
      for (std::uint32_t r = 0; r < kWorld; ++r) {
        const auto part = ChunkOf(grads[r], c);
        g.emplace_back(part.begin(), part.end());
      }
      testing::RefStep(config, g, w[c.id], v[c.id], s[c.id], it);
    }
    const std::vector<Weights> got = cluster.Iterate(it, grads);
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      ASSERT_EQ(got[r].size(), table.chunks().size()) << "rank " << r;
      for (const auto& [k, values] : got[r]) {
        const std::string what = "rank " + std::to_string(r) + ": WEIGHTS(" + std::to_string(k) +
                                 ", " + std::to_string(it) + ")";
        if (it == kResume + 1 && ahead.count(k)) {
          EXPECT_TRUE(SameBits(values, snapshot->chunks[k].weights))
              << what << " are not the snapshot's weights of 6";
        } else {
          ExpectNear(values, w.at(k), what);
        }
      }
    }
  }
  for (std::uint32_t c = 0; c < kCores; ++c) {
    std::size_t behind = 0;
    for (std::uint32_t k : table.chunks_on_core(c)) behind += ahead.count(k) ? 0 : 1;
    EXPECT_EQ(cluster.core(c).stats().aggregations, table.chunks_on_core(c).size() + behind)
        << "core " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ShardResumeTest,
                         ::testing::Values(ResumeCase{"Momentum",
                                                      kernels::OptimizerKind::kMomentum},
                                           ResumeCase{"Adam", kernels::OptimizerKind::kAdam}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace phub::server::shard_test
