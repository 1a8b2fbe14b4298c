// OptimizerConfig: names round-trip, unknown names are rejected with the accepted list,
// Validate names the bad hyper-parameter, StateArrays matches each optimizer's state.
#include <cmath>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::kernels {
namespace {

using ::testing::HasSubstr;

const OptimizerKind kAllKinds[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                   OptimizerKind::kNesterov, OptimizerKind::kAdam,
                                   OptimizerKind::kAverage};

TEST(OptimizerConfigTest, ParseRoundTripsEveryName) {
  for (OptimizerKind kind : kAllKinds) {
    const std::string name = OptimizerName(kind);
    auto parsed = ParseOptimizerKind(name);
    ASSERT_TRUE(parsed.ok()) << name << ": " << parsed.status();
    EXPECT_EQ(*parsed, kind) << name;
  }
  EXPECT_EQ(OptimizerName(OptimizerKind::kSgd), "sgd");
  EXPECT_EQ(OptimizerName(OptimizerKind::kMomentum), "momentum");
  EXPECT_EQ(OptimizerName(OptimizerKind::kNesterov), "nesterov");
  EXPECT_EQ(OptimizerName(OptimizerKind::kAdam), "adam");
  EXPECT_EQ(OptimizerName(OptimizerKind::kAverage), "average");
}

TEST(OptimizerConfigTest, AverageKeepsNoStateAndRefusesAWeightDecay) {
  OptimizerConfig c{.kind = OptimizerKind::kAverage};
  EXPECT_EQ(StateArrays(c.kind), 0);
  EXPECT_TRUE(Validate(c).ok());
  EXPECT_THAT(Describe(c), HasSubstr("mean gradient"));
  c.lr = -1.0f;  // not used in summation mode: not checked
  EXPECT_TRUE(Validate(c).ok());
  c.weight_decay = 0.1f;
  const Status s = Validate(c);
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("weight_decay=0.1"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("workers' optimizer"));
}

TEST(OptimizerConfigTest, ParseRejectsUnknownNameAndListsAcceptedOnes) {
  for (const std::string bad : {"adamw", "", "SGD", "sgd "}) {
    auto parsed = ParseOptimizerKind(bad);
    ASSERT_FALSE(parsed.ok()) << "'" << bad << "' was accepted";
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string msg(parsed.status().message());
    EXPECT_THAT(msg, HasSubstr("'" + bad + "'"));
    EXPECT_THAT(msg, HasSubstr("sgd, momentum, nesterov, adam"));
  }
}

TEST(OptimizerConfigTest, StateArraysPerOptimizer) {
  EXPECT_EQ(StateArrays(OptimizerKind::kSgd), 0);
  EXPECT_EQ(StateArrays(OptimizerKind::kMomentum), 1);
  EXPECT_EQ(StateArrays(OptimizerKind::kNesterov), 1);
  EXPECT_EQ(StateArrays(OptimizerKind::kAdam), 2);
}

TEST(OptimizerConfigTest, DescribeAdamMatchesDocumentedExample) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.lr = 0.001f;
  EXPECT_EQ(Describe(c), "adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0)");
}

TEST(OptimizerConfigTest, DescribeShowsOnlyTheOptimizersOwnParameters) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.lr = 0.1f;
  c.weight_decay = 0.0001f;
  EXPECT_EQ(Describe(c), "sgd(lr=0.1, weight_decay=0.0001)");
  c.kind = OptimizerKind::kNesterov;
  c.momentum = 0.95f;
  EXPECT_EQ(Describe(c), "nesterov(lr=0.1, momentum=0.95, weight_decay=0.0001)");
}

TEST(OptimizerConfigTest, DefaultsAreValidForEveryOptimizer) {
  for (OptimizerKind kind : kAllKinds) {
    OptimizerConfig c;
    c.kind = kind;
    EXPECT_TRUE(Validate(c).ok()) << Describe(c) << ": " << Validate(c);
  }
}

// Expects Validate to reject `c` with InvalidArgument and a message containing each of `parts`.
void ExpectRejected(const OptimizerConfig& c, std::initializer_list<std::string> parts) {
  const Status s = Validate(c);
  ASSERT_FALSE(s.ok()) << Describe(c) << " was accepted";
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  for (const std::string& part : parts) EXPECT_THAT(std::string(s.message()), HasSubstr(part));
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(OptimizerConfigTest, ValidateRejectsBadLearningRate) {
  for (OptimizerKind kind : kAllKinds) {
    if (kind == OptimizerKind::kAverage) continue;  // no learning rate (tested above)
    OptimizerConfig c;
    c.kind = kind;
    for (float lr : {0.0f, -0.1f, kNaN, kInf}) {
      c.lr = lr;
      ExpectRejected(c, {"lr=", "> 0"});
    }
  }
}

TEST(OptimizerConfigTest, ValidateRejectsNegativeOrNonFiniteWeightDecay) {
  OptimizerConfig c;
  for (float wd : {-1e-4f, kNaN, kInf}) {
    c.weight_decay = wd;
    ExpectRejected(c, {"weight_decay=", ">= 0"});
  }
  c.weight_decay = 0.0f;
  EXPECT_TRUE(Validate(c).ok());
}

TEST(OptimizerConfigTest, ValidateRejectsMomentumOutsideUnitInterval) {
  for (OptimizerKind kind : {OptimizerKind::kMomentum, OptimizerKind::kNesterov}) {
    OptimizerConfig c;
    c.kind = kind;
    for (float mu : {1.0f, -0.1f, 1.5f, kNaN}) {
      c.momentum = mu;
      ExpectRejected(c, {"momentum=", "[0, 1)"});
    }
    c.momentum = 0.0f;
    EXPECT_TRUE(Validate(c).ok());
  }
  // SGD and Adam do not use momentum, so its value does not matter to them.
  OptimizerConfig sgd;
  sgd.momentum = 2.0f;
  EXPECT_TRUE(Validate(sgd).ok());
}

TEST(OptimizerConfigTest, ValidateRejectsAdamBetasAndEps) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.beta1 = 1.0f;
  ExpectRejected(c, {"beta1=1", "[0, 1)"});
  c.beta1 = -0.5f;
  ExpectRejected(c, {"beta1=-0.5", "[0, 1)"});
  c.beta1 = 0.9f;
  c.beta2 = 1.0f;
  ExpectRejected(c, {"beta2=1", "[0, 1)"});
  c.beta2 = kNaN;
  ExpectRejected(c, {"beta2=", "[0, 1)"});
  c.beta2 = 0.999f;
  for (float eps : {0.0f, -1e-8f, kInf}) {
    c.eps = eps;
    ExpectRejected(c, {"eps=", "> 0"});
  }
}

TEST(OptimizerConfigTest, ValidateRejectsUnknownKind) {
  OptimizerConfig c;
  c.kind = static_cast<OptimizerKind>(42);
  ExpectRejected(c, {"42", "sgd, momentum, nesterov, adam"});
}

}  // namespace
}  // namespace phub::kernels
