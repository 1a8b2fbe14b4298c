// Shard's life around the data (shard_harness.h): attaching (unattached(), kAllAttached),
// leaving (BYE, or a connection lost without it: kWorkerLost, kLeftEarly), CloseAll, weights
// loaded by phubd, what the shard offers a transport (Buffers, LandingZones), and that it is
// used on its own thread only.
#include "phub/server/shard/shard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/phub/server/shard/shard_harness.h"

namespace phub::server::shard_test {
namespace {

using ::testing::HasSubstr;
using transport::Op;
using transport::WireHeader;

using phub::testing::Header;

// ---- Attaching, leaving, closing ----

// Connections count as unattached from accept to their ATTACH; kAllAttached is reported once,
// when the last rank attaches.
TEST_F(ShardTest, UnattachedCountsConnectionsUntilTheyAttach) {
  EXPECT_EQ(shard_.unattached(), 0u);
  std::vector<RawSocket> sockets;
  for (std::uint32_t r = 0; r < kWorld; ++r) sockets.push_back(Connect(shard_));
  ASSERT_TRUE(shard_.Eventually([](Shard& s) { return s.unattached() == kWorld; }));
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(sockets[r].SendWire(testing::AttachHeader(r, 0, kSession)));
    const std::size_t left = kWorld - r - 1;
    ASSERT_TRUE(shard_.Eventually([&](Shard& s) { return s.unattached() == left; }))
        << "rank " << r << "'s ATTACH";
    if (left > 0) {
      EXPECT_EQ(CountEvents(shard_.events(), ShardEvent::Kind::kAllAttached), 0u);
    }
  }
  const auto all = shard_.AwaitEvent(ShardEvent::Kind::kAllAttached);
  ASSERT_TRUE(all);
  EXPECT_EQ(all->core, 0u);
  EXPECT_EQ(shard_.events().size(), 1u);
}

// A worker whose data connection ends without BYE is reported lost (kWorkerLost, its rank and
// the connection's reason); the others' connections stay.
TEST_F(ShardTest, ClosingWithoutByeReportsTheWorkerLost) {
  ASSERT_NO_FATAL_FAILURE(Run());
  workers_[2].Close();
  const auto lost = shard_.AwaitEvent(ShardEvent::Kind::kWorkerLost);
  ASSERT_TRUE(lost) << "no kWorkerLost";
  EXPECT_EQ(lost->rank, 2);
  EXPECT_EQ(lost->core, 0u);
  EXPECT_THAT(lost->reason, HasSubstr("closed the connection"));
  shard_.Drain();
  for (std::uint32_t r = 0; r < 2; ++r) {
    EXPECT_FALSE(workers_[r].WaitClosed(Millis(0))) << "rank " << r << "'s connection closed too";
  }
}

// BYE then EOF is a clean leave: no kWorkerLost once the shard has seen the EOF (it closes its
// end, which the worker sees). If another worker then pushes a chunk that needs the leaver's
// copy too, the iteration can never complete: kLeftEarly names the leaver and the chunk, once.
TEST_F(ShardTest, ByeThenEofIsACleanLeave) {
  ASSERT_NO_FATAL_FAILURE(Run());
  ASSERT_TRUE(workers_[2].SendWire(Header(Op::kBye, 2, 0, 0, 0)));
  workers_[2].ShutdownWrite();
  ASSERT_TRUE(workers_[2].WaitClosed(kStep)) << "the shard did not close after BYE and EOF";
  shard_.Drain();
  EXPECT_EQ(CountEvents(shard_.events(), ShardEvent::Kind::kWorkerLost), 0u);

  for (std::uint32_t k : mine_) {
    ASSERT_TRUE(SendChunk(workers_[0], Op::kPush, 0, table_.chunks()[k], 1,
                          ChunkOf(initial_, table_.chunks()[k])));
  }
  const auto early = shard_.AwaitEvent(ShardEvent::Kind::kLeftEarly);
  ASSERT_TRUE(early) << "no kLeftEarly";
  EXPECT_EQ(early->rank, 2);
  EXPECT_THAT(early->reason, HasSubstr("rank 2 left (BYE) but chunk " +
                                       std::to_string(mine_.front()) + " of iteration 1"));
  shard_.Drain();
  const auto events = shard_.events();
  EXPECT_EQ(CountEvents(events, ShardEvent::Kind::kLeftEarly), 1u);
  EXPECT_EQ(CountEvents(events, ShardEvent::Kind::kWorkerLost), 0u);
  EXPECT_EQ(shard_.stats().aggregations, 0u);
}

// When every worker says BYE after its last iteration, nothing is reported at all.
TEST_F(ShardTest, EveryWorkerLeavingAfterItsLastIterationReportsNothing) {
  ASSERT_NO_FATAL_FAILURE(Run());
  ASSERT_NO_FATAL_FAILURE(Iterate(1));
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    ASSERT_TRUE(workers_[r].SendWire(Header(Op::kBye, r, 0, 0, 0)));
    workers_[r].ShutdownWrite();
  }
  for (std::uint32_t r = 0; r < kWorld; ++r) ASSERT_TRUE(workers_[r].WaitClosed(kStep));
  shard_.Drain();
  EXPECT_EQ(shard_.events().size(), 1u) << "more than kAllAttached reported";
  EXPECT_EQ(shard_.stats().aggregations, mine_.size());
}

// CloseAll closes attached and unattached connections alike, and reports none of them (the job
// is over: the closures are expected, not losses).
TEST_F(ShardTest, CloseAllClosesEveryConnectionAndReportsNoLoss) {
  ASSERT_NO_FATAL_FAILURE(Run());
  RawSocket stranger = Connect(shard_);
  ASSERT_TRUE(shard_.Eventually([](Shard& s) { return s.unattached() == 1; }));
  shard_.OnLoop([](Shard& s) { s.CloseAll(absl::CancelledError("job over")); });
  for (std::uint32_t r = 0; r < kWorld; ++r) EXPECT_TRUE(workers_[r].WaitClosed(kStep)) << r;
  EXPECT_TRUE(stranger.WaitClosed(kStep));
  shard_.Drain();
  EXPECT_EQ(shard_.unattached(), 0u);
  EXPECT_EQ(shard_.events().size(), 1u) << "a closure by CloseAll was reported";
}

// A shard belongs to the thread that made it (its core's loop): a call from another thread is
// caught where assertions are on (not with NDEBUG: the check is an assert).
TEST(ShardThread, ACallOffTheThreadThatMadeTheShardIsCaught) {
#ifdef NDEBUG
  GTEST_SKIP() << "assertions are off (NDEBUG)";
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Shard shard(MakeJob(), /*core=*/0, [](ShardEvent) {});
  EXPECT_DEATH(std::thread([&] { shard.ForgetWorker(0); }).join(), "off its core's thread");
  EXPECT_EQ(shard.ForgetWorker(0).uninitialized, 2u);  // its own thread: no complaint
#endif
}

// Weights loaded by phubd (JobSpec::initial_weights) go to every worker as WEIGHTS(k, 0) once
// all have attached, without any INIT; an INIT is then refused.
TEST(ShardInitialWeights, WeightsFromTheJobSpecGoOutOnceAllAttach) {
  auto job = MakeJob();
  std::mt19937 rng(11);
  const Tensors initial = RandomTensors(rng, -1.0f, 1.0f);
  for (const auto& t : initial)
    job->initial_weights.insert(job->initial_weights.end(), t.begin(), t.end());
  ShardOnLoop shard(job, 1);
  const auto& mine = job->table.chunks_on_core(1);
  std::vector<RawSocket> workers;
  for (std::uint32_t r = 0; r < kWorld; ++r) workers.push_back(Attached(shard, r));
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    auto got = ReadWeights(workers[r], r, mine, 0, job->table);
    ASSERT_EQ(got.size(), mine.size());
    for (const auto& [k, values] : got) {
      const auto want = ChunkOf(initial, job->table.chunks()[k]);
      EXPECT_TRUE(std::equal(values.begin(), values.end(), want.begin(), want.end())) << k;
    }
  }
  const keys::Chunk& c = job->table.chunks()[mine.front()];
  ASSERT_TRUE(SendChunk(workers[0], Op::kInit, 0, c, 0, ChunkOf(initial, c)));
  ASSERT_TRUE(workers[0].WaitClosed(kStep));
  const auto lost = shard.AwaitEvent(ShardEvent::Kind::kWorkerLost);
  ASSERT_TRUE(lost);
  EXPECT_THAT(lost->reason, HasSubstr("which already has weights"));
}

// ---- What the shard offers a transport ----

// Buffers(): per owned chunk, its slots (world × elements floats) and its weights, disjoint,
// the same spans for the shard's life.
TEST_F(ShardTest, BuffersAreEverySlotAndWeightOfItsChunks) {
  std::vector<std::span<std::byte>> buffers, again;
  shard_.OnLoop([&](Shard& s) {
    buffers = s.Buffers();
    again = s.Buffers();
  });
  ASSERT_EQ(buffers.size(), 2 * mine_.size());
  for (std::size_t i = 0; i < mine_.size(); ++i) {
    const keys::Chunk& c = table_.chunks()[mine_[i]];
    EXPECT_EQ(buffers[2 * i].size(), kWorld * c.bytes()) << "slots of chunk " << c.id;
    EXPECT_EQ(buffers[2 * i + 1].size(), c.bytes()) << "weights of chunk " << c.id;
  }
  for (std::size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(buffers[i].data(), again[i].data());
    for (std::size_t j = i + 1; j < buffers.size(); ++j) {
      const bool disjoint = buffers[i].data() + buffers[i].size() <= buffers[j].data() ||
                            buffers[j].data() + buffers[j].size() <= buffers[i].data();
      EXPECT_TRUE(disjoint) << "buffers " << i << " and " << j << " overlap";
    }
  }
}

// A connection that never attached, for LandingZones (which only reads the ATTACH).
class NoConnection final : public transport::Connection {
 public:
  void Start() override {}
  void Send(const WireHeader&, std::span<const std::byte>, SendDone done) override {
    if (done) done(absl::UnavailableError("no connection"));
  }
  void Close(const Status&) override {}
  bool closed() const override { return false; }
  std::string peer() const override { return "nowhere"; }
};

// LandingZones: rank r may write its own slot of every owned chunk with PUSH from iteration 1,
// and rank 0 also the weights of chunks still without them with INIT(0): exactly those bytes of
// Buffers(). No zones for a peer that has not said who it is, or whose ATTACH would be refused.
TEST_F(ShardTest, LandingZonesAreTheAttachingRanksSlotsAndRankZerosInit) {
  NoConnection connection;
  std::vector<std::span<std::byte>> buffers;
  StatusOr<std::vector<transport::LandingZone>> rank0, rank2, anonymous, wrong_session, wrong_core;
  const WireHeader attach0{Op::kAttach, 0, 0, kSession, 0};
  const WireHeader attach2{Op::kAttach, 2, 0, kSession, 0};
  const WireHeader stale{Op::kAttach, 2, 0, kSession + 1, 0};
  const WireHeader core1{Op::kAttach, 2, 1, kSession, 0};
  shard_.OnLoop([&](Shard& s) {
    buffers = s.Buffers();
    rank0 = s.LandingZones(connection, &attach0);
    rank2 = s.LandingZones(connection, &attach2);
    anonymous = s.LandingZones(connection, nullptr);
    wrong_session = s.LandingZones(connection, &stale);
    wrong_core = s.LandingZones(connection, &core1);
  });
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  ASSERT_TRUE(rank2.ok()) << rank2.status();
  EXPECT_EQ(rank0->size(), 2 * mine_.size());
  EXPECT_EQ(rank2->size(), mine_.size());
  // Chunk k's slots and weights in Buffers(): the pair at k's place among the core's chunks.
  auto buffers_of = [&](std::uint32_t chunk) {
    const auto place = std::find(mine_.begin(), mine_.end(), chunk) - mine_.begin();
    return std::pair(buffers[2 * place], buffers[2 * place + 1]);
  };
  for (const auto* zones : {&*rank0, &*rank2}) {
    for (const transport::LandingZone& z : *zones) {
      ASSERT_EQ(table_.owner(z.chunk), 0u) << "zone of chunk " << z.chunk;
      const keys::Chunk& c = table_.chunks()[z.chunk];
      const auto [slots, weights] = buffers_of(z.chunk);
      // PUSH lands in the worker's own slot of the chunk; INIT in the chunk's weights.
      const std::span<std::byte> want =
          z.op == Op::kPush ? slots.subspan(z.worker * c.bytes(), c.bytes()) : weights;
      EXPECT_EQ(z.bytes.data(), want.data()) << OpName(z.op) << " zone of chunk " << z.chunk;
      EXPECT_EQ(z.bytes.size(), want.size()) << OpName(z.op) << " zone of chunk " << z.chunk;
      if (z.op == Op::kPush) {
        EXPECT_EQ(z.first_iteration, 1u);
      } else {
        EXPECT_EQ(z.op, Op::kInit);
        EXPECT_EQ(z.worker, 0u);
        EXPECT_EQ(z.first_iteration, 0u);
      }
    }
  }
  for (const transport::LandingZone& z : *rank2) {
    EXPECT_EQ(z.op, Op::kPush);
    EXPECT_EQ(z.worker, 2u);
  }
  EXPECT_EQ(anonymous.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong_session.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(wrong_core.status().message()), HasSubstr("ATTACH for core 1"));
}

// A job with compact weights (JobSpec::wire.weights): each worker's first weights come whole,
// float32, as INIT; every later iteration's as a bf16 change. Added up in float32 the way a
// worker adds them, the changes keep every worker bit-identical and within one bf16 rounding
// of one step's change of the float64 reference (the weights themselves rounded to bf16 would
// be off by up to 2^-9 of their size); the bytes sent are half of float32's. With and without
// the previous weights kept.
TEST(ShardWire, CompactWeightsGoWholeFirstThenAsChangesThatAddUpToTheWeights) {
  for (const bool keep_previous : {false, true}) {
    SCOPED_TRACE(keep_previous ? "keep_previous" : "no previous");
    kernels::OptimizerConfig sgd;
    sgd.lr = 0.01f;  // changes far under the weights' bf16 spacing
    auto job = MakeJob(sgd);
    job->wire.format = kernels::WireFormat::kBf16;
    job->wire.weights = true;
    job->keep_previous = keep_previous;
    std::mt19937 rng(5);
    const Tensors initial = RandomTensors(rng, -1.0f, 1.0f);
    for (const auto& t : initial) {
      job->initial_weights.insert(job->initial_weights.end(), t.begin(), t.end());
    }
    ShardOnLoop shard(job, 0);
    const auto& mine = job->table.chunks_on_core(0);
    std::vector<RawSocket> workers;
    for (std::uint32_t r = 0; r < kWorld; ++r) workers.push_back(Attached(shard, r));
    // What each worker holds, by chunk, and the float64 reference.
    std::vector<std::map<std::uint32_t, std::vector<float>>> held(kWorld);
    std::map<std::uint32_t, std::vector<double>> reference;
    // The next message to rank r: `op` of `iteration`, `element_bytes` an element.
    WireHeader h;
    std::vector<std::byte> payload;
    const auto read = [&](std::uint32_t r, Op op, std::uint64_t iteration, std::size_t element_bytes) {
      if (workers[r].ReadWire(h, payload, kStep) != RawSocket::Read::kOk) return false;
      EXPECT_EQ(h.op, op) << "rank " << r << " got " << OpName(h.op);
      EXPECT_EQ(h.iteration, iteration);
      EXPECT_EQ(payload.size(), job->table.chunks()[h.chunk].elements * element_bytes);
      return h.op == op && h.iteration == iteration &&
             payload.size() == job->table.chunks()[h.chunk].elements * element_bytes;
    };
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      for (std::size_t n = 0; n < mine.size(); ++n) {
        ASSERT_TRUE(read(r, Op::kInit, 0, sizeof(float))) << "whole, float32, first";
        const keys::Chunk& c = job->table.chunks()[h.chunk];
        auto& v = held[r][h.chunk];
        v.resize(c.elements);
        std::memcpy(v.data(), payload.data(), payload.size());
        const auto want = ChunkOf(initial, c);
        EXPECT_TRUE(std::equal(v.begin(), v.end(), want.begin(), want.end())) << h.chunk;
        reference[h.chunk].assign(want.begin(), want.end());
      }
    }
    std::normal_distribution<float> g(0.0f, 1.0f);
    std::map<std::uint32_t, std::vector<double>> change;  // the reference's step, by chunk
    for (std::uint64_t it = 1; it <= 4; ++it) {
      std::map<std::uint32_t, std::vector<double>> step;
      for (std::uint32_t r = 0; r < kWorld; ++r) {
        for (std::uint32_t k : mine) {
          const keys::Chunk& c = job->table.chunks()[k];
          std::vector<kernels::Bf16> grad(c.elements);
          auto& sum = step[k];
          sum.resize(c.elements, 0.0);
          for (auto& x : grad) x = kernels::ToBf16(g(rng));
          for (std::uint32_t i = 0; i < c.elements; ++i) sum[i] += kernels::ToFloat(grad[i]);
          ASSERT_TRUE(workers[r].SendWire(
              phub::testing::Header(Op::kPush, r, k, it, c.elements * 2), std::as_bytes(std::span(grad))));
        }
      }
      std::map<std::uint32_t, std::vector<double>> before = change;
      for (std::uint32_t k : mine) {
        auto& w = reference[k];
        change[k].assign(w.size(), 0.0);
        before[k].resize(w.size(), 0.0);
        for (std::size_t i = 0; i < w.size(); ++i) {
          change[k][i] = -0.01 * step[k][i] / kWorld;
          w[i] += change[k][i];
        }
      }
      for (std::uint32_t r = 0; r < kWorld; ++r) {
        for (std::size_t n = 0; n < mine.size(); ++n) {
          ASSERT_TRUE(read(r, Op::kWeights, it, 2)) << "a bf16 change";
          auto& v = held[r][h.chunk];
          kernels::AddFromWire(kernels::WireFormat::kBf16, payload.data(), v);
        }
      }
      for (std::uint32_t k : mine) {
        for (std::uint32_t r = 1; r < kWorld; ++r) EXPECT_EQ(held[r][k], held[0][k]) << k;
        const auto& v = held[0][k];
        for (std::size_t i = 0; i < v.size(); ++i) {
          const double w = reference[k][i];
          // One bf16 rounding (2^-8 relative) of this change plus what the last one left, and
          // float32's rounding of the weights: far under bf16's of the weights (2^-9 of |w|).
          const double slack = (std::fabs(change[k][i]) + std::fabs(before[k][i])) * 0x1p-7;
          ASSERT_LE(std::fabs(v[i] - w), slack + std::fabs(w) * 0x1p-21)
              << "iteration " << it << " chunk " << k << " element " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace phub::server::shard_test

namespace phub::server::shard_test {
namespace {

// A job whose pushes travel in bf16 (JobSpec::wire): a PUSH of float32 size is refused at the
// shard's validation point, naming the element count and the job's format, and the worker is
// reported lost; the chunk's slots stay untouched.
TEST(ShardWire, APushOfTheWrongSizeForTheJobsFormatIsRefusedNamingIt) {
  auto job = MakeJob();
  job->wire.format = kernels::WireFormat::kBf16;
  job->wire.weights = true;
  ShardOnLoop shard(job, 0);
  const auto& mine = job->table.chunks_on_core(0);
  std::vector<RawSocket> workers;
  for (std::uint32_t r = 0; r < kWorld; ++r) workers.push_back(Attached(shard, r));
  const keys::Chunk& c = job->table.chunks()[mine.front()];
  std::vector<float> floats(c.elements, 0.5f);
  ASSERT_TRUE(SendChunk(workers[1], Op::kPush, 1, c, 1, floats));  // 4 bytes an element
  ASSERT_TRUE(workers[1].WaitClosed(kStep));
  const auto lost = shard.AwaitEvent(ShardEvent::Kind::kWorkerLost);
  ASSERT_TRUE(lost);
  EXPECT_THAT(lost->reason, HasSubstr(std::to_string(c.elements) + " elements in the job's bf16"));
  EXPECT_THAT(lost->reason, HasSubstr("carries " + std::to_string(c.bytes()) + " bytes"));
}

}  // namespace
}  // namespace phub::server::shard_test
