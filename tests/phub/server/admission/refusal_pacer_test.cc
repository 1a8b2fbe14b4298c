// The delay before a failed Hello's refusal: doubling per failure from the first delay to the
// most, halving per half-life of quiet, per source, and a bounded memory of sources.
#include "phub/server/admission/refusal_pacer.h"

#include <gtest/gtest.h>

namespace phub::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(RefusalPacerTest, DoublesPerFailureUpToTheMost) {
  RefusalPacer pacer({.first = milliseconds(100), .most = milliseconds(5000),
                      .half_life = seconds(60)});
  const auto t = RefusalPacer::Clock::time_point{} + seconds(1000);
  const std::int64_t expected[] = {100, 200, 400, 800, 1600, 3200, 5000, 5000};
  for (std::int64_t want : expected) {
    // Failures a few microseconds apart: decay is negligible, the delay is rounded down.
    const auto got = pacer.Fail("10.0.0.9", t).count();
    EXPECT_NEAR(static_cast<double>(got), static_cast<double>(want), 1.0);
  }
  // Another source starts from the first delay.
  EXPECT_EQ(pacer.Fail("10.0.0.1", t), milliseconds(100));
}

TEST(RefusalPacerTest, QuietHalvesTheCountPerHalfLife) {
  RefusalPacer pacer({.first = milliseconds(100), .most = milliseconds(100000),
                      .half_life = seconds(60)});
  auto t = RefusalPacer::Clock::time_point{} + seconds(1000);
  for (int i = 0; i < 4; ++i) pacer.Fail("s", t);  // level 4
  // Two half-lives later the level is 1, plus this failure: 2, so 200 ms.
  t += seconds(120);
  EXPECT_NEAR(static_cast<double>(pacer.Fail("s", t).count()), 200.0, 1.0);
  // Long after, it is as if new.
  t += seconds(3600);
  EXPECT_NEAR(static_cast<double>(pacer.Fail("s", t).count()), 100.0, 1.0);
}

TEST(RefusalPacerTest, RemembersABoundedNumberOfSources) {
  RefusalPacer pacer;
  const auto t = RefusalPacer::Clock::time_point{} + seconds(1000);
  for (int i = 0; i < 3; ++i) pacer.Fail("persistent", t);
  for (std::size_t i = 0; i < RefusalPacer::kMaxSources + 100; ++i) {
    pacer.Fail("10.1." + std::to_string(i), t);
  }
  EXPECT_EQ(pacer.sources(), RefusalPacer::kMaxSources);
  // The most suspect source was kept: its fourth failure waits 800 ms.
  EXPECT_EQ(pacer.Fail("persistent", t), milliseconds(800));
}

}  // namespace
}  // namespace phub::server
