#include "phub/common/member_schedule.h"

#include <gtest/gtest.h>

namespace phub {
namespace {

// Each iteration's members, a worker's place among them, and the batches taken before it,
// against a plain walk over the iterations.
TEST(MemberScheduleTest, PlacesAndBatchesBeforeMatchAWalkOverEveryIteration) {
  MemberSchedule s;
  s.Reset(1, {1, 0}, 0);               // iterations 1..9: ranks 0, 1
  s.Change(10, {3, 0, 1, 2});          // 10..17: four
  s.Change(18, {0, 1, 3});             // 18..: three (rank 2 left)
  std::uint64_t before = 0;
  for (std::uint64_t it = 1; it <= 30; ++it) {
    const std::uint32_t world = it < 10 ? 2 : it < 18 ? 4 : 3;
    for (std::uint32_t rank = 0; rank < 4; ++rank) {
      const IterationMembers m = s.Of(it, rank);
      const bool member = rank < 2 || (rank == 3 && it >= 10) || (rank == 2 && it >= 10 && it < 18);
      ASSERT_EQ(m.member, member) << "iteration " << it << " rank " << rank;
      ASSERT_EQ(m.world, world);
      ASSERT_EQ(m.member_iterations_before, before) << "iteration " << it;
      if (member) EXPECT_EQ(m.index, rank == 3 && it >= 18 ? 2u : rank);
      EXPECT_EQ(s.Contains(it, rank), member);
    }
    before += world;
  }
  EXPECT_FALSE(s.Of(0, 0).member);  // before the first entry
  EXPECT_EQ(s.LatestFrom(), 18u);
}

TEST(MemberScheduleTest, AChangeDecidedAgainForTheSameIterationReplacesTheLaterEntries) {
  MemberSchedule s;
  s.Reset(1, {0, 1}, 0);
  s.Change(10, {0, 1, 2});
  s.Change(12, {0, 1, 2, 3});
  s.Change(10, {0, 1, 3});  // decided again before any chunk reached 10
  EXPECT_EQ(s.LatestFrom(), 10u);
  EXPECT_EQ(s.Of(15, 3).index, 2u);
  EXPECT_FALSE(s.Contains(15, 2));
  EXPECT_EQ(s.MemberIterationsBefore(12), 9u * 2 + 2 * 3);
  s.ForgetBefore(11);  // the entry covering 11 stays
  EXPECT_TRUE(s.Contains(11, 3));
  EXPECT_EQ(s.MemberIterationsBefore(12), 9u * 2 + 2 * 3);
}

TEST(MemberScheduleTest, SetKeepsTheAnnouncedCountOfBatchesBefore) {
  MemberSchedule s;
  s.Set(26, {0, 1}, 77);  // a joiner's first: what phubd counted
  EXPECT_EQ(s.Of(26, 1).member_iterations_before, 77u);
  EXPECT_EQ(s.Of(28, 1).member_iterations_before, 81u);
  EXPECT_FALSE(s.Of(25, 1).member);
}

}  // namespace
}  // namespace phub
