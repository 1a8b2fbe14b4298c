#include "phub/common/log_limiter.h"

#include <gtest/gtest.h>

namespace phub {
namespace {

TEST(LogLimiterTest, AFewLinesPerIntervalThenCountsTheRestIntoTheNextLine) {
  LogLimiter limiter(3, std::chrono::seconds(10));
  LogLimiter::Clock::time_point t{};
  t += std::chrono::hours(1);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(limiter.Allow(t), std::optional<std::uint64_t>(0));
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(limiter.Allow(t + std::chrono::seconds(9)));
  // The next interval: its first line carries the count of those not logged.
  EXPECT_EQ(limiter.Allow(t + std::chrono::seconds(10)), std::optional<std::uint64_t>(1000));
  EXPECT_EQ(limiter.Allow(t + std::chrono::seconds(10)), std::optional<std::uint64_t>(0));
  EXPECT_EQ(LogLimiter::Note(0), "");
  EXPECT_EQ(LogLimiter::Note(1000), " (1000 more not logged before this)");
}

}  // namespace
}  // namespace phub
