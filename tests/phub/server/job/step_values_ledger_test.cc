// StepValuesLedger (phub/server/job/step_values_ledger.h): a job's agreement on each
// iteration's hyper-parameters, and its checks of what ranks send.
#include "phub/server/job/step_values_ledger.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "phub/common/member_schedule.h"

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

// An elastic job (MakeElastic): iteration t waits for the members of t still in the job. Ranks
// 0 and 1 start in a job of 3 slots; rank 1 leaves after giving iteration 2's values (they
// count: 2 is agreed with them once rank 0 gives its); rank 2 joins from iteration 4 (never
// awaited before it, refused before it enters); after every member is lost, iterations nobody
// pushes are passed without values up to a joiner's first.
TEST(StepValuesLedgerTest, AnElasticIterationWaitsForItsMembersStillInTheJob) {
  MemberSchedule schedule;
  schedule.Reset(1, {0, 1}, 0);
  StepValuesLedger ledger(kernels::OptimizerKind::kMomentum, 3, 0);
  ledger.MakeElastic([&](std::uint32_t rank, std::uint64_t it) { return schedule.Contains(it, rank); },
                     {0, 1});
  EXPECT_EQ(ledger.Missing(1), "0, 1");
  EXPECT_EQ(ledger.Give(1, 1, Lr(0.1f)).kind, Kind::kWaiting);
  EXPECT_EQ(ledger.Give(0, 1, Lr(0.1f)).kind, Kind::kAgreed);
  EXPECT_EQ(ledger.Give(1, 2, Lr(0.2f)).kind, Kind::kWaiting);
  EXPECT_TRUE(ledger.Leave(1).empty());  // 2 still waits for rank 0
  const auto refused = ledger.Give(2, 4, Lr(0.4f));
  EXPECT_EQ(refused.kind, Kind::kRefused);
  EXPECT_THAT(refused.why, HasSubstr("before it is a member of the job"));
  EXPECT_EQ(ledger.Missing(2), "0");
  EXPECT_EQ(ledger.Give(0, 2, Lr(0.2f)).kind, Kind::kAgreed);
  schedule.Change(4, {0, 2});
  ledger.Enter(2, 4);
  EXPECT_EQ(ledger.Missing(3), "0") << "rank 2 is not awaited before its first iteration";
  EXPECT_EQ(ledger.Give(0, 3, Lr(0.3f)).kind, Kind::kAgreed);
  EXPECT_EQ(ledger.Give(2, 4, Lr(0.4f)).kind, Kind::kWaiting);
  EXPECT_EQ(ledger.Missing(4), "0");
  // Rank 0 is lost before giving 4: rank 2's values settle it.
  const auto settled = ledger.Leave(0);
  ASSERT_EQ(settled.size(), 1u);
  EXPECT_EQ(settled[0].iteration, 4u);
  EXPECT_EQ(settled[0].values, Lr(0.4f));
  // Every member lost; a joiner's first is 8: 5, 6 and 7 are passed, nobody pushes them.
  EXPECT_TRUE(ledger.Leave(2).empty());
  EXPECT_EQ(ledger.last_agreed(), 4u);
  schedule.Change(6, {});
  schedule.Change(8, {1});
  ledger.Enter(1, 8);
  EXPECT_TRUE(ledger.Settle().empty());
  EXPECT_EQ(ledger.last_agreed(), 7u);
  EXPECT_FALSE(ledger.Agreed(6));
  EXPECT_EQ(ledger.Give(1, 8, Lr(0.8f)).kind, Kind::kAgreed);
}

// An elastic rank gives values only for iterations it is a member of; an iteration agreed by
// the Give of an earlier one is reported by Settle (none is lost).
TEST(StepValuesLedgerTest, AnElasticRankGivesOnlyItsIterationsAndNoAgreementIsLost) {
  MemberSchedule schedule;
  schedule.Reset(1, {0, 1}, 0);
  schedule.Change(3, {0});  // rank 1 leaves after iteration 2
  StepValuesLedger ledger(kernels::OptimizerKind::kMomentum, 2, 0);
  ledger.MakeElastic([&](std::uint32_t rank, std::uint64_t it) { return schedule.Contains(it, rank); },
                     {0, 1});
  EXPECT_EQ(ledger.Give(0, 1, Lr(0.1f)).kind, Kind::kWaiting);
  EXPECT_EQ(ledger.Give(1, 1, Lr(0.1f)).kind, Kind::kAgreed);
  EXPECT_EQ(ledger.Give(0, 2, Lr(0.2f)).kind, Kind::kWaiting);
  EXPECT_EQ(ledger.Give(0, 3, Lr(0.3f)).kind, Kind::kWaiting) << "3 waits for 2";
  const auto second = ledger.Give(1, 2, Lr(0.2f));
  EXPECT_EQ(second.kind, Kind::kAgreed);
  EXPECT_EQ(second.iteration, 2u);
  const auto settled = ledger.Settle();
  ASSERT_EQ(settled.size(), 1u) << "iteration 3, agreed with 2, was not reported";
  EXPECT_EQ(settled[0].iteration, 3u);
  EXPECT_EQ(settled[0].values, Lr(0.3f));
  EXPECT_TRUE(ledger.Settle().empty());
  const auto refused = ledger.Give(1, 3, Lr(0.3f));
  EXPECT_EQ(refused.kind, Kind::kRefused);
  EXPECT_THAT(refused.why, HasSubstr("of which it is not a member"));
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
