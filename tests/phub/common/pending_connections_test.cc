// Pending connections: each source's quota, and at the total the oldest gives way; checked
// against a naive model (a list of live connections) on random arrivals and departures.
#include "phub/common/pending_connections.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

namespace phub {
namespace {

TEST(PendingConnectionsTest, ASourceAtItsQuotaIsRefusedOthersAreNot) {
  PendingConnections pending({.per_source = 2, .total = 10});
  EXPECT_TRUE(pending.Admit("10.0.0.9", 1).admitted);
  EXPECT_TRUE(pending.Admit("10.0.0.9", 2).admitted);
  EXPECT_FALSE(pending.Admit("10.0.0.9", 3).admitted);
  EXPECT_TRUE(pending.Admit("10.0.0.1", 4).admitted);
  pending.Done(1);
  EXPECT_TRUE(pending.Admit("10.0.0.9", 5).admitted);
  EXPECT_EQ(pending.of_source("10.0.0.9"), 2u);
  EXPECT_EQ(pending.size(), 3u);
}

TEST(PendingConnectionsTest, AtTheTotalTheOldestGivesWay) {
  PendingConnections pending({.per_source = 100, .total = 3});
  for (std::uint64_t id = 1; id <= 3; ++id) EXPECT_TRUE(pending.Admit("a", id).admitted);
  auto fourth = pending.Admit("b", 4);
  EXPECT_TRUE(fourth.admitted);
  ASSERT_TRUE(fourth.evict.has_value());
  EXPECT_EQ(*fourth.evict, 1u);
  EXPECT_EQ(pending.size(), 3u);
  pending.Done(2);  // proved itself: no longer pending, not evicted later
  EXPECT_FALSE(pending.Admit("b", 5).evict.has_value());
  EXPECT_EQ(*pending.Admit("c", 6).evict, 3u);
}

TEST(PendingConnectionsTest, MatchesANaiveModelOnRandomTraffic) {
  std::mt19937 rng(11);
  const PendingLimits limits{.per_source = 3, .total = 8};
  PendingConnections pending(limits);
  struct Live {
    std::uint64_t id;
    int source;
  };
  std::vector<Live> model;  // oldest first
  std::uint64_t next = 1;
  for (int step = 0; step < 20000; ++step) {
    if (model.empty() || rng() % 3 != 0) {
      const int source = static_cast<int>(rng() % 5);
      const auto count = std::count_if(model.begin(), model.end(),
                                       [&](const Live& l) { return l.source == source; });
      const std::uint64_t id = next++;
      auto got = pending.Admit(std::to_string(source), id);
      if (count >= limits.per_source) {
        ASSERT_FALSE(got.admitted);
        continue;
      }
      ASSERT_TRUE(got.admitted);
      if (model.size() >= limits.total) {
        ASSERT_TRUE(got.evict.has_value());
        ASSERT_EQ(*got.evict, model.front().id);
        model.erase(model.begin());
      } else {
        ASSERT_FALSE(got.evict.has_value());
      }
      model.push_back({id, source});
    } else {
      const std::size_t i = rng() % model.size();
      pending.Done(model[i].id);
      model.erase(model.begin() + static_cast<std::ptrdiff_t>(i));
    }
    ASSERT_EQ(pending.size(), model.size());
    for (int s = 0; s < 5; ++s) {
      ASSERT_EQ(pending.of_source(std::to_string(s)),
                static_cast<std::uint32_t>(std::count_if(
                    model.begin(), model.end(), [&](const Live& l) { return l.source == s; })));
    }
  }
}

}  // namespace
}  // namespace phub
