// The allreduce exchange's schedule (phub/exchange/allreduce_exchange.h, BeginIteration): two
// ranks of the TCP ring in this process train with hyper-parameters that change every
// iteration (a warm-up and a decay of the lr through 0, momentum, weight decay and Adam's
// betas moving too) and end bit-identical and like a float64 reference of the same schedule
// (tests/reference/optimizer_reference.h). The next iteration's values are given while the
// last one's pushes may still be queued: each push steps with the values of its own iteration.
// Values the optimizer refuses are refused and leave the exchange going.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <thread>

#include "phub/exchange/ring_exchange.h"
#include "tests/reference/optimizer_reference.h"

namespace phub::exchange {
namespace {

using ::testing::HasSubstr;
using testing::RefConfig;
using testing::RefOptimizer;

constexpr int kSteps = 12;
const std::vector<keys::TensorSpec> kTensors = {{"a", 3}, {"b", 70001}, {"c", 1}, {"d", 4097}};

// Rank r's gradient of tensor t at step s: random, different on every rank and step.
std::vector<float> Gradient(int rank, int step, std::size_t t, std::size_t n) {
  std::mt19937 rng(1000 * rank + 10 * step + static_cast<unsigned>(t));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> g(n);
  for (float& x : g) x = u(rng);
  return g;
}
std::vector<float> InitialWeights(int rank, std::size_t t, std::size_t n) {
  return Gradient(rank + 7, 99, t, n);  // only rank 0's survive Init
}

// Step s's values: a linear warm-up of the lr over 4 steps, then a decay that reaches 0 at
// step 8 and comes back (lr 0 is a step that moves only the state); the other values move
// every step within their ranges.
kernels::StepValues ValuesAt(int s) {
  const double lr = s < 4 ? 0.1 * (s + 1) / 4 : 0.1 * std::fabs(std::cos(M_PI * (s - 4) / 8));
  return {.lr = s == 8 ? 0.0f : static_cast<float>(lr),
          .momentum = 0.5f + 0.04f * static_cast<float>(s),
          .weight_decay = 1e-3f * static_cast<float>(s % 3),
          .beta1 = 0.8f + 0.01f * static_cast<float>(s),
          .beta2 = 0.99f + 0.0005f * static_cast<float>(s),
          .eps = 1e-8f * static_cast<float>(1 + s)};
}

RefConfig Reference(RefOptimizer kind, const kernels::StepValues& v) {
  // The float32 values the exchange steps with, exactly.
  return {.kind = kind,
          .lr = v.lr,
          .momentum = v.momentum,
          .weight_decay = v.weight_decay,
          .beta1 = v.beta1,
          .beta2 = v.beta2,
          .eps = v.eps};
}

// The mean gradient and the schedule's values, step by step, in float64 from rank 0's weights.
std::vector<std::vector<double>> Simulate(RefOptimizer kind, int world) {
  std::vector<std::vector<double>> weights;
  for (std::size_t t = 0; t < kTensors.size(); ++t) {
    const std::size_t n = kTensors[t].elements;
    auto w0 = InitialWeights(0, t, n);
    std::vector<double> w(w0.begin(), w0.end()), v, s;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<std::vector<double>> grads;
      for (int r = 0; r < world; ++r) {
        auto g = Gradient(r, step, t, n);
        grads.emplace_back(g.begin(), g.end());
      }
      testing::RefStep(Reference(kind, ValuesAt(step)), grads, w, v, s,
                       static_cast<std::uint64_t>(step + 1));
    }
    weights.push_back(std::move(w));
  }
  return weights;
}

struct Case {
  const char* name;
  kernels::OptimizerKind kind;
  RefOptimizer reference;
};

class AllreduceScheduleTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "phub-ax-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  RingExchangeOptions Options() {
    RingExchangeOptions o;
    o.ring.rendezvous = dir_;
    o.ring.connect_timeout_ms = 20000;
    // The values Create is given are never stepped with: every iteration brings its own.
    o.optimizer = kernels::WithValues({.kind = GetParam().kind}, {.lr = 5.0f, .momentum = 0.0f});
    return o;
  }

  // Trains kSteps on one rank, giving each iteration's values before its first push without
  // waiting for the last iteration's answers first; returns the error, if any.
  std::string TrainRank(int rank, int world, std::vector<std::vector<float>>& w) {
    w.clear();
    std::vector<std::span<float>> spans;
    for (std::size_t t = 0; t < kTensors.size(); ++t) {
      w.push_back(InitialWeights(rank, t, kTensors[t].elements));
      spans.emplace_back(w.back());
    }
    auto run = [&]() -> Status {
      PHUB_ASSIGN_OR_RETURN(auto x, ConnectRingExchange(Options(),
                                                        {static_cast<std::uint32_t>(rank),
                                                         static_cast<std::uint32_t>(world)},
                                                        kTensors, spans));
      PHUB_RETURN_IF_ERROR(x->Init());
      std::vector<std::vector<float>> grads(kTensors.size());
      for (int s = 0; s < kSteps; ++s) {
        PHUB_RETURN_IF_ERROR(x->BeginIteration(ValuesAt(s)));
        for (std::size_t t = kTensors.size(); t-- > 0;) {  // backward order
          const auto tensor = static_cast<std::uint32_t>(t);
          if (s > 0) PHUB_RETURN_IF_ERROR(x->Wait(tensor));  // only now: last step's answer
          grads[t] = Gradient(rank, s, t, kTensors[t].elements);
          PHUB_RETURN_IF_ERROR(x->Push(tensor, grads[t]));
        }
      }
      PHUB_RETURN_IF_ERROR(x->WaitAll());
      return x->Close();
    };
    const Status s = run();
    return s.ok() ? "" : s.ToString();
  }

  std::string dir_;
};

TEST_P(AllreduceScheduleTest, TwoRanksFollowTheValuesOfEachIterationLikeFloat64) {
  std::vector<std::vector<float>> w0, w1;
  std::string e1;
  std::thread peer([&] { e1 = TrainRank(1, 2, w1); });
  const std::string e0 = TrainRank(0, 2, w0);
  peer.join();
  ASSERT_EQ(e0, "");
  ASSERT_EQ(e1, "");
  EXPECT_EQ(w0, w1);  // the ring leaves every rank bit-identical
  const auto want = Simulate(GetParam().reference, 2);
  for (std::size_t t = 0; t < kTensors.size(); ++t) {
    double err = 0, norm = 0;
    for (std::size_t i = 0; i < want[t].size(); ++i) {
      ASSERT_FALSE(std::isnan(w0[t][i])) << "tensor " << t << " element " << i;
      err += (w0[t][i] - want[t][i]) * (w0[t][i] - want[t][i]);
      norm += want[t][i] * want[t][i];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "tensor " << kTensors[t].name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, AllreduceScheduleTest,
    ::testing::Values(Case{"sgd", kernels::OptimizerKind::kSgd, RefOptimizer::kSgd},
                      Case{"momentum", kernels::OptimizerKind::kMomentum, RefOptimizer::kMomentum},
                      Case{"nesterov", kernels::OptimizerKind::kNesterov, RefOptimizer::kNesterov},
                      Case{"adam", kernels::OptimizerKind::kAdam, RefOptimizer::kAdam}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

class AllreduceBeginIterationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "phub-ax-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string dir_;
};

// One rank: w -= lr * g with the values given, a refused value changes nothing, and after
// Close BeginIteration is refused like Push.
TEST_F(AllreduceBeginIterationTest, RefusedValuesLeaveTheLastOnesAndTheExchangeGoing) {
  RingExchangeOptions o;
  o.ring.rendezvous = dir_;
  o.optimizer = {.kind = kernels::OptimizerKind::kSgd, .lr = 0.5f};
  std::vector<float> w = {1, 2, 3};
  const std::vector<float> g = {2, 2, 2};
  auto x = ConnectRingExchange(o, {}, {{"w", 3}}, {std::span<float>(w)});
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE((*x)->Init().ok());

  ASSERT_TRUE((*x)->BeginIteration({.lr = 0.25f}).ok());
  ASSERT_TRUE((*x)->Push(0, g).ok());
  ASSERT_TRUE((*x)->Wait(0).ok());
  EXPECT_EQ(w, (std::vector<float>{0.5f, 1.5f, 2.5f}));  // w -= 0.25 * 2

  for (const kernels::StepValues& bad :
       {kernels::StepValues{.lr = -0.1f}, kernels::StepValues{.lr = NAN},
        kernels::StepValues{.lr = 0.1f, .weight_decay = -1.0f}}) {
    const Status refused = (*x)->BeginIteration(bad);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_THAT(std::string(refused.message()), HasSubstr("BeginIteration"));
  }
  ASSERT_TRUE((*x)->Push(0, g).ok());  // still 0.25, and still going
  ASSERT_TRUE((*x)->Wait(0).ok());
  EXPECT_EQ(w, (std::vector<float>{0.0f, 1.0f, 2.0f}));

  ASSERT_TRUE((*x)->BeginIteration({.lr = 0.0f}).ok());  // lr 0: a schedule's end may be there
  ASSERT_TRUE((*x)->Push(0, g).ok());
  ASSERT_TRUE((*x)->Wait(0).ok());
  EXPECT_EQ(w, (std::vector<float>{0.0f, 1.0f, 2.0f}));

  ASSERT_TRUE((*x)->Close().ok());
  EXPECT_EQ((*x)->BeginIteration({.lr = 0.1f}).code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace phub::exchange
