// StepValuesLedger (phub/server/job/step_values_ledger.h): a job's agreement on each
// iteration's hyper-parameters, and its checks of what ranks send.
#include "phub/server/job/step_values_ledger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace phub::server {
namespace {

using ::testing::HasSubstr;
using Kind = StepValuesLedger::Outcome::Kind;

kernels::StepValues Lr(float lr) { return {.lr = lr, .momentum = 0.9f}; }

TEST(StepValuesLedgerTest, AnIterationIsAgreedWhenEveryRankGaveTheSameValues) {
  StepValuesLedger ledger(kernels::OptimizerKind::kMomentum, 3, 0);
  EXPECT_EQ(ledger.Give(1, 1, Lr(0.1f)).kind, Kind::kWaiting);
  EXPECT_EQ(ledger.Missing(1), "0, 2");
  EXPECT_EQ(ledger.Give(0, 1, Lr(0.1f)).kind, Kind::kWaiting);
  // A rank may give the next iteration's before the others finished this one.
  EXPECT_EQ(ledger.Give(0, 2, Lr(0.2f)).kind, Kind::kWaiting);
  const auto agreed = ledger.Give(2, 1, Lr(0.1f));
  EXPECT_EQ(agreed.kind, Kind::kAgreed);
  EXPECT_EQ(agreed.iteration, 1u);
  EXPECT_EQ(agreed.values, Lr(0.1f));
  EXPECT_EQ(ledger.last_agreed(), 1u);
  EXPECT_EQ(ledger.Missing(1), "");
  EXPECT_EQ(ledger.Missing(2), "1, 2");
  EXPECT_EQ(ledger.Give(1, 2, Lr(0.2f)).kind, Kind::kWaiting);
  EXPECT_EQ(ledger.Give(2, 2, Lr(0.2f)).kind, Kind::kAgreed);
  ASSERT_TRUE(ledger.Agreed(2));
  EXPECT_EQ(*ledger.Agreed(2), Lr(0.2f));
}

TEST(StepValuesLedgerTest, RanksThatDisagreeAreNamedWithTheirValues) {
  StepValuesLedger ledger(kernels::OptimizerKind::kMomentum, 2, 0);
  ASSERT_EQ(ledger.Give(0, 1, Lr(0.1f)).kind, Kind::kWaiting);
  const auto outcome = ledger.Give(1, 1, Lr(0.2f));
  EXPECT_EQ(outcome.kind, Kind::kDisagreed);
  EXPECT_THAT(outcome.why, HasSubstr("iteration 1"));
  EXPECT_THAT(outcome.why, HasSubstr("rank 1 gives lr=0.2, momentum=0.9"));
  EXPECT_THAT(outcome.why, HasSubstr("rank 0 lr=0.1, momentum=0.9"));
  EXPECT_NE(ledger.last_agreed(), 1u);
}

TEST(StepValuesLedgerTest, WrongMessagesAreRefusedNamingWhatIsWrong) {
  StepValuesLedger ledger(kernels::OptimizerKind::kAdam, 2, 10);
  // Not the rank's next iteration (it resumes at 10: its next is 11).
  auto o = ledger.Give(0, 13, {.lr = 0.1f});
  EXPECT_EQ(o.kind, Kind::kRefused);
  EXPECT_THAT(o.why, HasSubstr("its next are iteration 11's"));
  // Values the optimizer refuses: NaN, a negative lr, beta1 of 1.
  o = ledger.Give(0, 11, {.lr = std::numeric_limits<float>::quiet_NaN()});
  EXPECT_EQ(o.kind, Kind::kRefused);
  EXPECT_THAT(o.why, HasSubstr("lr=nan"));
  o = ledger.Give(0, 11, {.lr = -1.0f});
  EXPECT_EQ(o.kind, Kind::kRefused);
  o = ledger.Give(0, 11, {.lr = 0.1f, .beta1 = 1.0f});
  EXPECT_EQ(o.kind, Kind::kRefused);
  EXPECT_THAT(o.why, HasSubstr("beta1=1"));
  // lr 0 is a schedule's value like any other.
  EXPECT_EQ(ledger.Give(0, 11, {.lr = 0.0f}).kind, Kind::kWaiting);
  // Far ahead of the job: refused, so what one rank sends holds bounded memory.
  EXPECT_EQ(ledger.Give(0, 12, {.lr = 0.0f}).kind, Kind::kWaiting);
  o = ledger.Give(0, 13, {.lr = 0.0f});
  EXPECT_EQ(o.kind, Kind::kRefused);
  EXPECT_THAT(o.why, HasSubstr("more than 2 past the job's iteration 10"));
}

TEST(StepValuesLedgerTest, ARejoinedRankGivesItsValuesAgainAndMustMatchTheAgreedOnes) {
  StepValuesLedger ledger(kernels::OptimizerKind::kMomentum, 2, 0, Lr(0.05f));
  EXPECT_EQ(*ledger.Agreed(0), Lr(0.05f));
  ASSERT_EQ(ledger.Give(0, 1, Lr(0.1f)).kind, Kind::kWaiting);
  ASSERT_EQ(ledger.Give(1, 1, Lr(0.1f)).kind, Kind::kAgreed);
  ASSERT_EQ(ledger.Give(1, 2, Lr(0.2f)).kind, Kind::kWaiting);
  // Rank 1 dies and rejoins at iteration 0: it replays 1 (agreed) and 2 (its old copy forgotten).
  ledger.Rejoin(1, 0);
  EXPECT_EQ(ledger.Missing(2), "0, 1");
  EXPECT_EQ(ledger.Give(1, 1, Lr(0.1f)).kind, Kind::kWaiting);
  ASSERT_EQ(ledger.Give(0, 2, Lr(0.2f)).kind, Kind::kWaiting);
  EXPECT_EQ(ledger.Give(1, 2, Lr(0.2f)).kind, Kind::kAgreed);
  // A replay with other values than the job stepped with is a disagreement.
  ledger.Rejoin(0, 1);
  const auto o = ledger.Give(0, 2, Lr(0.3f));
  EXPECT_EQ(o.kind, Kind::kDisagreed);
  EXPECT_THAT(o.why, HasSubstr("the job stepped it with lr=0.2"));
}

TEST(StepValuesLedgerTest, OnlyTheLastFewAgreedIterationsAreKept) {
  StepValuesLedger ledger(kernels::OptimizerKind::kSgd, 1, 0);
  for (std::uint64_t t = 1; t <= 20; ++t) {
    ASSERT_EQ(ledger.Give(0, t, {.lr = 0.01f * t}).kind, Kind::kAgreed);
  }
  EXPECT_FALSE(ledger.Agreed(20 - StepValuesLedger::kKept));
  ASSERT_TRUE(ledger.Agreed(20 - StepValuesLedger::kKept + 1));
  EXPECT_EQ(ledger.Agreed(20)->lr, 0.01f * 20);
}

}  // namespace
}  // namespace phub::server
