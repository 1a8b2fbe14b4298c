// The exchange switch refuses options that do not fit the chosen backend, naming the fix, and
// the ring exchange (one rank, in process) checks its calls; the NCCL exchange steps weights
// like a float64 reference on a GPU, and says why it cannot run elsewhere. Training through
// every backend with real processes is tests/integration/exchange_training_test.cc.
#include "phub/exchange/make_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <random>

namespace phub::exchange {
namespace {

using ::testing::HasSubstr;

std::string Message(const Status& s) { return std::string(s.message()); }

TEST(ParseEndpointTest, AcceptsHostPortAndRefusesTheRest) {
  auto ok = ParseEndpoint("10.77.0.100:7070");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->host, "10.77.0.100");
  EXPECT_EQ(ok->port, 7070);
  for (const char* bad : {"10.0.0.1", ":7070", "host:", "host:0", "host:65536", "host:70x"}) {
    auto parsed = ParseEndpoint(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_THAT(Message(parsed.status()), HasSubstr(std::string("'") + bad + "'"));
  }
}

TEST(ParseExchangeKindTest, KnowsTheFourNames) {
  EXPECT_EQ(*ParseExchangeKind("ps"), ExchangeKind::kPs);
  EXPECT_EQ(*ParseExchangeKind("ps-colocated"), ExchangeKind::kPsColocated);
  EXPECT_EQ(*ParseExchangeKind("ring"), ExchangeKind::kRing);
  EXPECT_EQ(*ParseExchangeKind("nccl"), ExchangeKind::kNccl);
  EXPECT_THAT(Message(ParseExchangeKind("nccl2").status()),
              HasSubstr("ps, ps-colocated, ring or nccl"));
}

TEST(MakeExchangeTest, OptionsThatDoNotFitTheKindAreRefused) {
  std::vector<float> w(10);
  ExchangeOptions options;
  options.kind = ExchangeKind::kPs;
  options.ps.servers = {{"127.0.0.1", 1}, {"127.0.0.1", 2}};
  auto two = MakeExchange(options, {{"w", 10}}, {std::span<float>(w)});
  EXPECT_EQ(two.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(two.status()), HasSubstr("ps-colocated"));

  options.kind = ExchangeKind::kPsColocated;
  options.ps.servers.clear();
  EXPECT_THAT(Message(MakeExchange(options, {{"w", 10}}, {std::span<float>(w)}).status()),
              HasSubstr("got none"));

  options.kind = ExchangeKind::kRing;
  EXPECT_THAT(Message(MakeExchange(options, {{"w", 10}}, {std::span<float>(w)}).status()),
              HasSubstr("rendezvous"));

  options.kind = ExchangeKind::kNccl;
  options.membership.world_size = 2;
  EXPECT_THAT(Message(MakeExchange(options, {{"w", 10}}, {std::span<float>(w)}).status()),
              HasSubstr("rendezvous"));
}

// Where the build has no NCCL, or no GPU is visible, --comm nccl says so instead of training.
// On a GPU: one rank's exchange steps its weights as plain SGD in float64 says, over tensors
// of several lengths (each staged through its own device buffer), several steps in a row.
TEST(NcclExchangeTest, OneRankStepsLikeFloat64OrSaysWhyItCannot) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<std::vector<float>> w = {std::vector<float>(1000), std::vector<float>(3),
                                       std::vector<float>(1000)};
  std::vector<std::vector<double>> expect(w.size());
  for (std::size_t t = 0; t < w.size(); ++t) {
    for (float& x : w[t]) x = normal(rng);
    expect[t].assign(w[t].begin(), w[t].end());
  }
  ExchangeOptions options;
  options.kind = ExchangeKind::kNccl;
  options.nccl.optimizer.lr = 0.25f;
  auto exchange = MakeExchange(options, {{"a", 1000}, {"b", 3}, {"c", 1000}},
                               {std::span<float>(w[0]), std::span<float>(w[1]),
                                std::span<float>(w[2])});
#ifndef PHUB_HAVE_NCCL
  ASSERT_EQ(exchange.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(Message(exchange.status()), HasSubstr("--comm ring"));
  GTEST_SKIP() << "this build has no NCCL (CMake found no CUDA toolkit with NCCL)";
#else
  if (exchange.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << "no usable GPU: " << exchange.status();
  }
  ASSERT_TRUE(exchange.ok()) << exchange.status();
  ASSERT_TRUE((*exchange)->Init().ok());
  EXPECT_EQ((*exchange)->name(), "nccl");
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> g(w.size());
    for (std::size_t t = w.size(); t-- > 0;) {  // backward order, as the Trainer pushes
      g[t].resize(w[t].size());
      for (float& x : g[t]) x = normal(rng);
      for (std::size_t i = 0; i < g[t].size(); ++i) expect[t][i] -= 0.25 * double{g[t][i]};
      ASSERT_TRUE((*exchange)->Push(static_cast<std::uint32_t>(t), g[t]).ok());
    }
    ASSERT_TRUE((*exchange)->WaitAll().ok());
  }
  for (std::size_t t = 0; t < w.size(); ++t) {
    for (std::size_t i = 0; i < w[t].size(); ++i) {
      ASSERT_NEAR(w[t][i], expect[t][i], 1e-5) << "tensor " << t << " element " << i;
    }
  }
  EXPECT_TRUE((*exchange)->Close().ok());
#endif
}

TEST(PsExchangeTest, MoreServersThanPartitionsIsRefusedBeforeConnecting) {
  std::vector<float> w(10);
  PsExchangeOptions options;
  options.servers = {{"127.0.0.1", 1}, {"127.0.0.1", 2}};  // nothing listens: never reached
  options.partition_bytes = 1 << 20;
  auto exchange = PsExchange::Connect(options, {}, {{"w", 10}}, {std::span<float>(w)});
  EXPECT_EQ(exchange.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Message(exchange.status()), HasSubstr("would own nothing"));
}

class RingExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "phub-rx-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  RingExchangeOptions Options() {
    RingExchangeOptions options;
    options.ring.rendezvous = dir_;
    options.optimizer.lr = 0.5f;
    return options;
  }
  std::string dir_;
};

TEST_F(RingExchangeTest, OneRankStepsItsOwnWeightsAndChecksItsCalls) {
  std::vector<float> w = {1, 2, 3}, g = {2, 2, 2};
  auto exchange = ConnectRingExchange(Options(), {}, {{"w", 3}}, {std::span<float>(w)});
  ASSERT_TRUE(exchange.ok()) << exchange.status();
  ASSERT_TRUE((*exchange)->Init().ok());
  EXPECT_EQ(w, (std::vector<float>{1, 2, 3}));  // rank 0 keeps its weights
  ASSERT_TRUE((*exchange)->Push(0, g).ok());
  ASSERT_TRUE((*exchange)->Wait(0).ok());
  EXPECT_EQ(w, (std::vector<float>{0, 1, 2}));  // w -= 0.5 * mean(g)
  std::vector<float> short_grad(2);
  EXPECT_THAT(Message((*exchange)->Push(0, short_grad)), HasSubstr("has 2 floats; the tensor has 3"));
  EXPECT_THAT(Message((*exchange)->Push(1, g)), HasSubstr("does not exist"));
  EXPECT_TRUE((*exchange)->Close().ok());
  EXPECT_THAT(Message((*exchange)->Push(0, g)), HasSubstr("after Close"));
}

TEST_F(RingExchangeTest, BadOptimizerAndMismatchedBuffersAreRefused) {
  std::vector<float> w(3);
  RingExchangeOptions options = Options();
  options.optimizer.lr = -1;
  EXPECT_THAT(Message(ConnectRingExchange(options, {}, {{"w", 3}}, {std::span<float>(w)}).status()),
              HasSubstr("lr"));
  EXPECT_THAT(
      Message(ConnectRingExchange(Options(), {}, {{"w", 4}}, {std::span<float>(w)}).status()),
      HasSubstr("holds 3 floats"));
}

}  // namespace
}  // namespace phub::exchange
