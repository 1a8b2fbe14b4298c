// StalledNames: a stalled elastic job's name is refused for the memory, with the reason and the
// ways out; forgotten after it; at most kMaxNames remembered (the oldest go first); none with a
// memory of 0.
#include "phub/server/admission/stalled_names.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace phub::server {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using std::chrono::milliseconds;
using Clock = StalledNames::Clock;

TEST(StalledNamesTest, ANameIsRefusedForTheMemoryThenForgotten) {
  StalledNames names(milliseconds(60000));
  const Clock::time_point t0 = Clock::now();
  names.Remember("fmnist-1", "fewer than 2 members for 60000 ms", t0);
  const auto refusal = names.RefusalFor("fmnist-1", t0 + milliseconds(12500));
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->code(), proto::Error::JOB_STALLED);
  EXPECT_THAT(refusal->message(), AllOf(HasSubstr("'fmnist-1' stalled 12 s ago"),
                                        HasSubstr("fewer than 2 members for 60000 ms"),
                                        HasSubstr("initial weights")));
  EXPECT_THAT(refusal->fix(), AllOf(HasSubstr("--resume"), HasSubstr("new name"),
                                    HasSubstr("in 48 s"), HasSubstr("--stalled-name-memory-ms")));
  EXPECT_FALSE(names.RefusalFor("fmnist-2", t0 + milliseconds(1)).has_value());
  EXPECT_TRUE(names.RefusalFor("fmnist-1", t0 + milliseconds(59999)).has_value());
  EXPECT_FALSE(names.RefusalFor("fmnist-1", t0 + milliseconds(60000)).has_value());
  EXPECT_EQ(names.size(), 0u);
}

TEST(StalledNamesTest, AtMostKMaxNamesTheOldestForgottenFirst) {
  StalledNames names(milliseconds(3600000));
  const Clock::time_point t0 = Clock::now();
  for (std::size_t i = 0; i <= StalledNames::kMaxNames; ++i) {
    names.Remember("job-" + std::to_string(i), "lost", t0 + milliseconds(i));
  }
  EXPECT_EQ(names.size(), StalledNames::kMaxNames);
  const Clock::time_point later = t0 + milliseconds(StalledNames::kMaxNames + 1);
  EXPECT_FALSE(names.RefusalFor("job-0", later).has_value()) << "the oldest stays";
  EXPECT_TRUE(names.RefusalFor("job-1", later).has_value());
  EXPECT_TRUE(names.RefusalFor("job-" + std::to_string(StalledNames::kMaxNames), later).has_value());
  // Remembering a name again moves it, not adds it.
  names.Remember("job-1", "lost again", later);
  EXPECT_EQ(names.size(), StalledNames::kMaxNames);
  EXPECT_THAT(names.RefusalFor("job-1", later)->message(), HasSubstr("lost again"));
}

TEST(StalledNamesTest, AMemoryOfZeroRemembersNothing) {
  StalledNames names(milliseconds(0));
  const Clock::time_point t0 = Clock::now();
  names.Remember("fmnist-1", "lost", t0);
  EXPECT_FALSE(names.RefusalFor("fmnist-1", t0).has_value());
  EXPECT_EQ(names.size(), 0u);
}

}  // namespace
}  // namespace phub::server
