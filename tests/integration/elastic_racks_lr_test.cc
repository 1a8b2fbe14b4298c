// --lr-scaling across racks (docs/design.md "Elastic jobs", "Racks of racks"): rack r0's part is
// elastic (it starts with 2 of its 3 hosts, a worker joins, then two ask to leave: 2, 3, 2, 1
// members), rack r1's is fixed (2), and every rack's workers give --lr-scaling linear. Each
// rack's sums carry its members of the iteration, each PBox its rack's start size, and the homes
// step iteration t with lr x (r0's members + r1's 2) / (2 + 2). The weights equal a float64
// reference with that lr, and are far from the reference with the lr unscaled (so the test
// fails if the homes do not scale).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <mutex>
#include <thread>

#include "phub/server/shard/copy_count.h"
#include "tests/integration/elastic_racks_fixture.h"

namespace phub::testing {
namespace {

constexpr kernels::LrScaling kLinear = kernels::LrScaling::kLinear;

TEST(ElasticRacksTest, TheLrFollowsTheMembersOfEveryRackWithLinearScaling) {
  TempDir dir;
  RackPhubds pboxes(dir, {});
  const std::vector<std::uint16_t>& ports = pboxes.ports;
  const auto logs = [&] { return pboxes.Logs(); };
  // By rack, its workers: r0's ranks 0, 1 (and 2, which joins), r1's ranks 0, 1.
  std::vector<std::vector<InProcessWorker>> racks(kRacks);
  racks[0].resize(3);
  racks[1].resize(2);
  {
    const std::vector<std::pair<std::uint32_t, std::uint32_t>> seats = {
        {0, 0}, {0, 1}, {1, 0}, {1, 1}};
    std::vector<std::thread> threads;
    for (const auto& [rack, rank] : seats) {
      threads.emplace_back([&, rack, rank] {
        InProcessWorker& w = racks[rack][rank];
        w = ConnectInRack(ports[rack], rack, rank, /*start=*/2, kLinear);
        if (w.status.ok()) w.status = w.client->Init();
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& [rack, rank] : seats) {
      ASSERT_TRUE(racks[rack][rank].status.ok())
          << "rack " << rack << " rank " << rank << ": " << racks[rack][rank].status << logs();
    }
  }
  std::vector<bool> in = {true, true, false};  // rack r0's ranks in the job
  std::mutex mu;
  Pushed pushed;
  std::map<std::uint64_t, std::uint32_t> r0_members;  // as r0's rank 0 was told
  const auto iterate = [&](std::uint64_t it) {
    r0_members[it] = racks[0][0].client->MembersOf(it).world;
    std::vector<std::thread> threads;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> who;
    std::vector<Status> results(5);
    for (std::uint32_t r = 0; r < kRacks; ++r) {
      for (std::uint32_t k = 0; k < racks[r].size(); ++k) {
        if (r == 0 && !in[k]) continue;
        InProcessWorker& w = racks[r][k];
        if (!w.client->MembersOf(it).member) continue;
        const std::size_t slot = who.size();
        who.emplace_back(r, k);
        threads.emplace_back([&, &w = w, r, k, slot] {
          results[slot] = RunIteration(w, it, SeedOf(r));
          if (!results[slot].ok()) return;
          std::lock_guard lock(mu);
          pushed[it].insert({r, k});
        });
      }
    }
    for (auto& t : threads) t.join();
    for (std::size_t s = 0; s < who.size(); ++s) {
      EXPECT_TRUE(results[s].ok()) << "iteration " << it << ", rack " << who[s].first << " rank "
                                   << who[s].second << ": " << results[s];
    }
  };
  for (std::uint64_t it = 1; it <= 6; ++it) iterate(it);
  // Rank 2 joins r0 while the others train: from iteration 8, its first weights of 7.
  std::thread joiner([&] {
    InProcessWorker& w = racks[0][2];
    w = ConnectInRack(ports[0], 0, 2, /*start=*/2, kLinear);
    if (w.status.ok()) w.status = w.client->Init();
  });
  ASSERT_TRUE(AwaitWorld(*racks[0][0].client, 8, 3)) << "the join was not announced" << logs();
  iterate(7);
  joiner.join();
  ASSERT_TRUE(racks[0][2].status.ok()) << racks[0][2].status << logs();
  ASSERT_EQ(racks[0][2].client->resume_iteration(), 7u);
  in[2] = true;
  for (std::uint64_t it = 8; it <= 14; ++it) iterate(it);
  // Rank 1 of r0 leaves (it pushes 15, not 16), then rank 2 (it pushes 21, not 22).
  for (const auto& [rank, last] : {std::pair{1u, 15u}, std::pair{2u, 21u}}) {
    ASSERT_TRUE(racks[0][rank].client->RequestLeave().ok());
    const std::uint32_t left = rank == 1 ? 2 : 1;
    ASSERT_TRUE(AwaitWorld(*racks[0][0].client, last + 1, left))
        << "rank " << rank << "'s leave was not announced" << logs();
    for (std::uint64_t it = pushed.rbegin()->first + 1; it <= last; ++it) iterate(it);
    EXPECT_FALSE(racks[0][rank].client->MembersOf(last + 1).member);
    EXPECT_TRUE(racks[0][rank].client->Close().ok());
    in[rank] = false;
  }
  constexpr std::uint64_t kLast = 28;
  for (std::uint64_t it = 22; it <= kLast; ++it) iterate(it);
  ASSERT_FALSE(::testing::Test::HasFailure()) << logs();

  // r0's members, as the homes' counts of members had them: 2, 3, 2, 1.
  std::vector<std::uint32_t> phases;
  for (const auto& [it, members] : r0_members) {
    EXPECT_EQ(pushed.at(it).size(), members + 2u) << "iteration " << it;
    if (phases.empty() || phases.back() != members) phases.push_back(members);
  }
  EXPECT_EQ(phases, (std::vector<std::uint32_t>{2, 3, 2, 1}));
  // Every rack's members over the racks' start sizes: r0 starts with 2, r1 has its 2.
  const auto reference = Reference(pushed, kLast, [&](std::uint64_t it) {
    return static_cast<double>(kLr) * (r0_members.at(it) + 2.0) / 4.0;
  });
  const auto unscaled = Reference(pushed, kLast);
  double gap = 0;
  for (const InProcessWorker* w : {&racks[0][0], &racks[1][0], &racks[1][1]}) {
    for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
      for (std::uint64_t i = 0; i < kSizes[t]; ++i) {
        ASSERT_LE(std::abs(w->weights[t][i] - reference[t][i]),
                  1e-5 + 1e-4 * std::abs(reference[t][i]))
            << "tensor " << t << "[" << i << "]: got " << w->weights[t][i] << ", reference "
            << reference[t][i] << logs();
        gap = std::max(gap, std::abs(w->weights[t][i] - unscaled[t][i]));
      }
    }
  }
  EXPECT_GT(gap, 1e-3) << "the lr did not follow the members of every rack";
  EXPECT_EQ(racks[0][0].weights, racks[1][0].weights) << "the racks hold different weights";
  for (InProcessWorker* w : {&racks[0][0], &racks[1][0], &racks[1][1]}) {
    EXPECT_TRUE(w->client->Close().ok());
  }
}

// A chunk's home, driven by two forged PBoxes with --lr-scaling linear (rack r0 of 2 workers
// starting with 1, r1 of 1): it scales the lr by the members the sums count over the start
// sizes summed — not by their copies, which differ when a member is lost mid-iteration — and
// refuses a sum that counts more copies than members, naming both, without stepping.
TEST(ElasticRacksTest, AHomeScalesTheLrByTheMembersTheSumsCountNotTheirCopies) {
  ForgedPboxes forged;
  forged.Start(kLinear);
  auto& [dir, home, weights, pboxes] = forged;
  constexpr std::uint32_t kElements = ForgedPboxes::kElements;
  constexpr std::uint32_t kCounts = server::kCountElements;
  ASSERT_TRUE(pboxes[0] && pboxes[1]) << ReadFile(home.log_path);
  std::vector<std::vector<float>> sums(2, std::vector<float>(kElements + kCounts));
  const auto push = [&](std::uint32_t r, float value, float copies, float members) {
    std::fill(sums[r].begin(), sums[r].end(), value);
    sums[r][kElements] = copies;
    sums[r][kElements + 1] = members;
    return pboxes[r]->Push(0, sums[r]);
  };
  EXPECT_TRUE(push(0, 1.0f, 1, 2).ok());  // rack r0: 2 members, one lost mid-iteration: 1 copy
  EXPECT_TRUE(push(1, 4.0f, 1, 1).ok());  // rack r1: its one copy, of 4
  for (auto& p : pboxes) ASSERT_TRUE(p->Wait(0).ok()) << ReadFile(home.log_path);
  for (std::uint32_t i = 0; i < kElements; ++i) {
    // lr 1 x (2 + 1) members / (1 + 1) started = 1.5, on (1 + 4) / 2 copies: 3.75. By the
    // copies (2 / 2) it would be 2.5.
    ASSERT_EQ(weights[0][i], 1.0f + static_cast<float>(i) - 3.75f) << i;
  }
  (void)push(0, 1.0f, 2, 1);  // 2 copies of 1 member: no rack's sum (the home closes the link)
  EXPECT_FALSE(pboxes[0]->Wait(0).ok()) << "more copies than members were taken";
  EXPECT_TRUE(WaitFor(
      [&] {
        return ReadFile(home.log_path)
                   .find("from the PBox of rack 0: its count of copies is 2, not a whole "
                         "number of 0 to 1 (its count of members)") != std::string::npos;
      },
      std::chrono::milliseconds(10000)))
      << ReadFile(home.log_path);
  EXPECT_TRUE(home.process.Running());
}

// Racks whose workers disagree on --lr-scaling: each rack's part forms (its workers agree), but
// the homes refuse the second PBox's lr scaling, naming both, and every worker hears that its
// job cannot go on rather than hang.
TEST(ElasticRacksTest, RacksThatDisagreeOnTheLrScalingAreRefusedByTheHomes) {
  TempDir dir;
  // A home whose part cannot form (a PBox refused) gives up on the others soon.
  RackPhubds pboxes(dir, {"--form-timeout-ms", "3000"});
  std::vector<InProcessWorker> workers(4);
  std::vector<std::thread> threads;
  const std::vector<std::pair<std::uint32_t, std::uint32_t>> seats = {
      {0, 0}, {0, 1}, {1, 0}, {1, 1}};
  for (std::size_t k = 0; k < seats.size(); ++k) {
    threads.emplace_back([&, k] {
      const auto [rack, rank] = seats[k];
      workers[k] = ConnectInRack(pboxes.ports[rack], rack, rank, 2,
                                 rack == 0 ? kLinear : kernels::LrScaling::kFixed);
      if (workers[k].status.ok()) workers[k].status = workers[k].client->Init();
      if (workers[k].status.ok()) workers[k].status = RunIteration(workers[k], 1, SeedOf(rack));
    });
  }
  for (auto& t : threads) t.join();
  for (std::size_t k = 0; k < seats.size(); ++k) {
    EXPECT_FALSE(workers[k].status.ok()) << "rack " << seats[k].first << " rank "
                                         << seats[k].second << " trained";
  }
  EXPECT_NE(pboxes.Logs().find("lr scaling"), std::string::npos) << pboxes.Logs();
  EXPECT_TRUE(WaitFor(
      [&] {
        const std::string logs = pboxes.Logs();
        return logs.find("brings lr scaling none (its rack's workers'), the PBox of rack 0 "
                         "linear") != std::string::npos ||
               logs.find("brings lr scaling linear (its rack's workers'), the PBox of rack 1 "
                         "none") != std::string::npos;
      },
      std::chrono::milliseconds(10000)))
      << pboxes.Logs();
}

}  // namespace
}  // namespace phub::testing
