// Ring allreduce against a float64 reference: N ranks as threads of this process (each with its
// own event loop and real TCP connections on 127.0.0.1), random inputs, lengths that are 0, 1,
// smaller than N, not divisible by N, and several pieces per segment; several calls in a row so
// a fast rank's next call overlaps a slow rank's current one.
#include "phub/ring/ring_allreduce.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/support/free_port.h"

namespace phub::ring {
namespace {

struct RingCase {
  std::uint32_t world;
  std::size_t length;
  std::uint64_t piece_bytes;
  ReduceOp op;
  kernels::WireFormat wire = kernels::WireFormat::kFp32;
  bool tcp_rendezvous = false;  // tcp://127.0.0.1:PORT served by rank 0, not a directory
};

void PrintTo(const RingCase& c, std::ostream* os) {
  *os << "N=" << c.world << " n=" << c.length << " piece=" << c.piece_bytes
      << (c.op == ReduceOp::kMean ? " mean" : " sum") << " " << kernels::WireFormatName(c.wire)
      << (c.tcp_rendezvous ? " tcp-rendezvous" : "");
}

std::string MakeTempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "phub-ring-XXXXXX").string();
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

class RingAllreduceTest : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAllreduceTest, MatchesTheFloat64SumOnEveryRank) {
  const RingCase c = GetParam();
  const std::string dir = MakeTempDir();
  const std::string rendezvous =
      c.tcp_rendezvous ? absl::StrCat("tcp://127.0.0.1:", testing::FreeLoopbackPort(), "/ring-test")
                       : dir;
  constexpr int kCalls = 4;
  // inputs[call][rank][i]
  std::mt19937 rng(1234 + c.world * 7 + c.length);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<std::vector<float>>> inputs(kCalls);
  for (auto& call : inputs) {
    call.assign(c.world, std::vector<float>(c.length));
    for (auto& rank : call) for (float& v : rank) v = uniform(rng);
  }
  std::vector<std::vector<std::vector<float>>> outputs = inputs;
  std::vector<Status> status(c.world);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < c.world; ++r) {
    threads.emplace_back([&, r] {
      RingOptions options;
      options.rendezvous = rendezvous;
      options.piece_bytes = c.piece_bytes;
      options.wire = c.wire;
      options.connect_timeout_ms = 20000;
      auto ring = RingAllreduce::Connect(options, {r, c.world});
      if (!ring.ok()) {
        status[r] = ring.status();
        return;
      }
      for (int k = 0; k < kCalls && status[r].ok(); ++k) {
        // Ranks run at different speeds, so later calls overlap earlier ones across ranks.
        if (r == static_cast<std::uint32_t>(k) % c.world) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        status[r] = (*ring)->Allreduce(outputs[k][r], c.op);
      }
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  for (std::uint32_t r = 0; r < c.world; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];

  // A compact wire rounds each of the N - 1 partial sums passed on and the result (half an
  // ulp of the format, relative to sums of at most N), and the result is in the format.
  const double half_ulp = c.wire == kernels::WireFormat::kBf16   ? 0x1p-9
                          : c.wire == kernels::WireFormat::kFp16 ? 0x1p-12
                                                                 : 0.0;
  const double tolerance = 1e-5 * c.world + half_ulp * c.world * c.world;
  for (int k = 0; k < kCalls; ++k) {
    for (std::size_t i = 0; i < c.length; ++i) {
      double expected = 0;
      for (std::uint32_t r = 0; r < c.world; ++r) expected += inputs[k][r][i];
      if (c.op == ReduceOp::kMean) expected /= c.world;
      for (std::uint32_t r = 0; r < c.world; ++r) {
        ASSERT_NEAR(outputs[k][r][i], expected, tolerance)
            << "call " << k << " rank " << r << " element " << i;
      }
      if (c.wire != kernels::WireFormat::kFp32) {
        const float x = outputs[k][0][i];
        std::uint32_t wire = 0;
        kernels::ConvertToWire(c.wire, std::span(&x, 1), reinterpret_cast<std::byte*>(&wire));
        float back = 0;
        kernels::ConvertFromWire(c.wire, reinterpret_cast<const std::byte*>(&wire),
                                 std::span(&back, 1));
        ASSERT_EQ(back, x) << "call " << k << " element " << i << " is not a "
                           << kernels::WireFormatName(c.wire) << " value";
      }
    }
    // Every rank holds bit-identical results: each segment was reduced once and copied around.
    for (std::uint32_t r = 1; r < c.world; ++r) EXPECT_EQ(outputs[k][r], outputs[k][0]);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RingAllreduceTest,
    ::testing::Values(RingCase{1, 1000, 4096, ReduceOp::kSum}, RingCase{2, 0, 4096, ReduceOp::kSum},
                      RingCase{2, 1, 4096, ReduceOp::kSum}, RingCase{3, 2, 4096, ReduceOp::kSum},
                      RingCase{3, 1001, 64, ReduceOp::kMean},
                      RingCase{4, 100003, 4096, ReduceOp::kSum},
                      RingCase{5, 77777, 1 << 20, ReduceOp::kMean},
                      RingCase{2, 300000, 16384, ReduceOp::kMean},
                      // The compact wire: early messages, several pieces, mean and sum.
                      RingCase{3, 1001, 64, ReduceOp::kMean, kernels::WireFormat::kBf16},
                      RingCase{4, 100003, 4096, ReduceOp::kSum, kernels::WireFormat::kBf16},
                      RingCase{5, 77777, 1 << 20, ReduceOp::kMean, kernels::WireFormat::kFp16},
                      RingCase{2, 1, 4096, ReduceOp::kSum, kernels::WireFormat::kFp16},
                      // The TCP rendezvous (rank 0 serves it): no shared directory.
                      RingCase{2, 1001, 64, ReduceOp::kSum, kernels::WireFormat::kFp32, true},
                      RingCase{5, 77777, 4096, ReduceOp::kMean, kernels::WireFormat::kFp32, true},
                      RingCase{8, 100003, 4096, ReduceOp::kSum, kernels::WireFormat::kBf16,
                               true}));

TEST(RingAllreduce, RankOutsideTheWorldIsRefused) {
  RingOptions options;
  auto ring = RingAllreduce::Connect(options, {3, 3});
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RingAllreduce, MissingNeighbourTimesOutNamingTheFile) {
  const std::string dir = MakeTempDir();
  RingOptions options;
  options.rendezvous = dir;
  options.connect_timeout_ms = 200;
  auto ring = RingAllreduce::Connect(options, {0, 2});
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(ring.status().message().find("rank1.addr"), absl::string_view::npos) << ring.status();
  std::filesystem::remove_all(dir);
}

TEST(RingAllreduce, MissingNeighbourOverTcpTimesOutNamingTheKeyAndTheAddress) {
  RingOptions options;
  options.rendezvous = absl::StrCat("tcp://127.0.0.1:", testing::FreeLoopbackPort());
  options.connect_timeout_ms = 300;
  auto ring = RingAllreduce::Connect(options, {0, 2});
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kDeadlineExceeded) << ring.status();
  const std::string message(ring.status().message());
  EXPECT_NE(message.find("rank1.addr"), std::string::npos) << message;
  EXPECT_NE(message.find(options.rendezvous), std::string::npos) << message;
  EXPECT_NE(message.find("ring rank 0"), std::string::npos) << message;
}

TEST(RingAllreduce, AMistypedRendezvousIsRefused) {
  RingOptions options;
  options.rendezvous = "tpc://127.0.0.1:1234";
  auto ring = RingAllreduce::Connect(options, {0, 2});
  EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument) << ring.status();
}

}  // namespace
}  // namespace phub::ring
