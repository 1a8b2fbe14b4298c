// Elastic jobs across racks (docs/design.md "Elastic jobs", "Racks of racks") through a real
// phubd per rack: rack r0's part is elastic (a worker joins it, one asks to leave, one is
// SIGKILLed), rack r1's is fixed, and every chunk's home divides each iteration by the workers'
// copies both racks summed in it, which the racks' sums count. The weights equal a float64
// reference whose iteration t averages every copy pushed in t across both racks; a home that
// divided by the job's most workers (r0's 3 hosts and r1's 2) would miss it in every iteration
// (r0 never has its 3 members and r1's 2 at once for long: the counts are 4, 5, 4, 3).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "phub/client/detail/rack_role.h"
#include "phub/server/shard/copy_count.h"
#include "tests/integration/elastic_racks_fixture.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/reference/optimizer_reference.h"
#include "tests/support/forged_client.h"
#include "tests/support/free_port.h"

namespace phub::testing {
namespace {

TEST(ElasticRacksTest, AnElasticRacksCopiesAreCountedByTheHomesEveryIteration) {
  ChildWorker child = ForkWorker(2, 2);  // before any thread
  ASSERT_GT(child.pid, 0);
  TempDir dir;
  RackPhubds pboxes(dir, {});
  const std::vector<std::uint16_t>& ports = pboxes.ports;
  const auto logs = [&] { return pboxes.Logs(); };
  // By rack: r0's ranks 0 and 1 (rank 2 is the child), r1's ranks 0 and 1.
  std::vector<std::vector<InProcessWorker>> racks(kRacks);
  {
    std::vector<std::pair<std::uint32_t, std::uint32_t>> seats = {{0, 0}, {0, 1}, {1, 0}, {1, 1}};
    std::vector<InProcessWorker> connected(seats.size());
    std::vector<std::thread> threads;
    for (std::size_t k = 0; k < seats.size(); ++k) {
      threads.emplace_back([&, k] {
        connected[k] = ConnectInRack(ports[seats[k].first], seats[k].first, seats[k].second);
        if (connected[k].status.ok()) connected[k].status = connected[k].client->Init();
      });
    }
    for (auto& t : threads) t.join();
    for (std::size_t k = 0; k < seats.size(); ++k) {
      ASSERT_TRUE(connected[k].status.ok())
          << "rack " << seats[k].first << " rank " << seats[k].second << ": " << connected[k].status
          << logs();
      racks[seats[k].first].push_back(std::move(connected[k]));
    }
  }
  std::mutex mu;
  Pushed pushed;
  bool child_in = false;
  std::vector<bool> in = {true, true};  // rack r0's ranks 0 and 1 still run
  // One iteration by every member of each rack (threads, and the child through its pipe).
  const auto iterate = [&](std::uint64_t it) {
    std::vector<std::thread> threads;
    std::vector<std::pair<std::uint32_t, std::uint32_t>> who;
    std::vector<Status> results(4);
    for (std::uint32_t r = 0; r < kRacks; ++r) {
      for (std::uint32_t k = 0; k < racks[r].size(); ++k) {
        if (r == 0 && !in[k]) continue;
        InProcessWorker& w = racks[r][k];
        if (!w.client->MembersOf(it).member) continue;
        const std::size_t slot = who.size();
        const std::pair<std::uint32_t, std::uint32_t> seat(r, w.client->rank());
        who.push_back(seat);
        threads.emplace_back([&, &w = w, seat, slot] {
          results[slot] = RunIteration(w, it, SeedOf(seat.first));
          if (!results[slot].ok()) return;
          std::lock_guard lock(mu);
          pushed[it].insert(seat);
        });
      }
    }
    if (child_in) child.Iterate(it);
    for (auto& t : threads) t.join();
    for (std::size_t k = 0; k < who.size(); ++k) {
      EXPECT_TRUE(results[k].ok()) << "iteration " << it << ", rack " << who[k].first << " rank "
                                   << who[k].second << ": " << results[k];
    }
    if (child_in) {
      EXPECT_EQ(child.Hear(), "ok") << "iteration " << it;
      pushed[it].insert({0, 2});
    }
  };
  for (std::uint64_t it = 1; it <= 6; ++it) iterate(it);
  // Rank 2 joins rack r0: decided where every chunk has completed 6, so from iteration 8.
  child.Say(std::to_string(ports[0]));
  ASSERT_TRUE(AwaitWorld(*racks[0][0].client, 8, 3)) << "the join was not announced" << logs();
  iterate(7);  // the joiner's first weights, of 7, come from this one
  ASSERT_EQ(child.Hear(), "joined 7") << logs();
  child_in = true;
  for (std::uint64_t it = 8; it <= 14; ++it) iterate(it);
  // Rank 1 of r0 asks to leave: it pushes 15, not 16.
  ASSERT_TRUE(racks[0][1].client->RequestLeave().ok());
  ASSERT_TRUE(AwaitWorld(*racks[0][0].client, 16, 2)) << "the leave was not announced" << logs();
  iterate(15);
  EXPECT_FALSE(racks[0][1].client->MembersOf(16).member);
  EXPECT_TRUE(racks[0][1].client->Close().ok());
  in[1] = false;
  for (std::uint64_t it = 16; it <= 22; ++it) iterate(it);
  // The child is lost at a boundary: it pushed 22 whole, nothing of 23.
  child_in = false;
  child.Kill();
  ASSERT_TRUE(AwaitWorld(*racks[0][0].client, 24, 1)) << "the loss was not announced" << logs();
  constexpr std::uint64_t kLast = 30;
  for (std::uint64_t it = 23; it <= kLast; ++it) iterate(it);
  ASSERT_FALSE(::testing::Test::HasFailure()) << logs();

  // The copies each iteration had, across both racks: r0's members and r1's 2.
  std::vector<std::size_t> counts;
  for (std::uint64_t it = 1; it <= kLast; ++it) {
    if (counts.empty() || counts.back() != pushed.at(it).size())
      counts.push_back(pushed.at(it).size());
  }
  EXPECT_THAT(counts, ::testing::ElementsAre(4, 5, 4, 3));

  const auto reference = Reference(pushed, kLast);
  // 30 float32 momentum steps on values of order 1 leave a few 1e-6; one iteration divided by
  // 5 instead of 4 moves the weights by > 1e-3.
  const auto expect_near = [&](const InProcessWorker& w, const std::string& who) {
    for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
      for (std::uint64_t i = 0; i < kSizes[t]; ++i) {
        ASSERT_LE(std::abs(w.weights[t][i] - reference[t][i]),
                  1e-5 + 1e-4 * std::abs(reference[t][i]))
            << who << ": tensor " << t << "[" << i << "]: got " << w.weights[t][i] << ", reference "
            << reference[t][i];
      }
    }
  };
  expect_near(racks[0][0], "rack r0 rank 0");
  expect_near(racks[1][0], "rack r1 rank 0");
  expect_near(racks[1][1], "rack r1 rank 1");
  // Every rack's workers hold the homes' very bits.
  EXPECT_EQ(racks[0][0].weights, racks[1][0].weights);
  EXPECT_EQ(racks[1][0].weights, racks[1][1].weights);
  for (InProcessWorker* w : {&racks[0][0], &racks[1][0], &racks[1][1]}) {
    EXPECT_TRUE(w->client->Close().ok());
  }
}

// Rack r0's only member (rank 0, which started the job) is SIGKILLed: r0 is below its minimum
// and holds, and so does r1 (2 fixed workers: the homes wait for r0's sums). A joiner brings
// r0 back; every iteration r0 had nobody for goes to the homes as a sum of no copies, which
// r1's copies alone step, and the joiner starts from those weights. The weights follow the
// reference throughout.
TEST(ElasticRacksTest, ARackWhoseMembersAreAllLostSendsSumsOfNoCopiesUntilAJoinerComes) {
  ChildWorker child = ForkWorker(0, 1);  // before any thread
  ASSERT_GT(child.pid, 0);
  TempDir dir;
  RackPhubds pboxes(dir, {"--rejoin-timeout-ms", "30000"});
  std::vector<InProcessWorker> r1(2);  // rack r1's fixed part: its 2 hosts
  std::vector<std::thread> starters;
  for (std::uint32_t k = 0; k < 2; ++k) {
    starters.emplace_back([&, k] {
      r1[k] = ConnectInRack(pboxes.ports[1], 1, k);
      if (r1[k].status.ok()) r1[k].status = r1[k].client->Init();
    });
  }
  child.Say(std::to_string(pboxes.ports[0]));
  EXPECT_EQ(child.Hear(), "joined 0");
  for (auto& t : starters) t.join();
  for (const auto& w : r1) ASSERT_TRUE(w.status.ok()) << w.status << pboxes.Logs();
  Pushed pushed;
  std::mutex mu;
  constexpr std::uint64_t kLast = 16;
  // Rack r1 trains throughout, at the homes' pace: iterations 1..5 with r0's child, then
  // (waiting for the homes, which wait for r0) with r0's joiner.
  std::vector<Status> r1_results(2);
  std::vector<std::thread> r1_threads;
  for (std::uint32_t k = 0; k < 2; ++k) {
    r1_threads.emplace_back([&, k] {
      for (std::uint64_t it = 1; it <= kLast && r1_results[k].ok(); ++it) {
        r1_results[k] = RunIteration(r1[k], it, SeedOf(1));
        std::lock_guard lock(mu);
        if (r1_results[k].ok()) pushed[it].insert({1, k});
      }
    });
  }
  for (std::uint64_t it = 1; it <= 5; ++it) {
    child.Iterate(it);
    ASSERT_EQ(child.Hear(), "ok");
    std::lock_guard lock(mu);
    pushed[it].insert({0, 0});
  }
  child.Kill();                                                 // at a boundary: it pushed 5 whole
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // r0's PBox sees it lost
  InProcessWorker joiner = ConnectInRack(pboxes.ports[0], 0, 1, 1);
  Status joined = joiner.status.ok() ? joiner.client->Init() : joiner.status;
  EXPECT_TRUE(joined.ok()) << joined << pboxes.Logs();
  const std::uint64_t resumed = joined.ok() ? joiner.client->resume_iteration() : kLast;
  // The loss's change takes effect at 7 at the earliest (r0's chunks had all completed 5): r0
  // had nobody for 6 at least, and sent the homes sums of no copies for it.
  EXPECT_GE(resumed, 6u);
  EXPECT_LT(resumed, 10u);
  for (std::uint64_t it = resumed + 1; it <= kLast && joined.ok(); ++it) {
    ASSERT_TRUE(RunIteration(joiner, it, SeedOf(0)).ok()) << "iteration " << it << pboxes.Logs();
    std::lock_guard lock(mu);
    pushed[it].insert({0, 1});
  }
  for (auto& t : r1_threads) t.join();
  for (const Status& r : r1_results) ASSERT_TRUE(r.ok()) << r << pboxes.Logs();
  ASSERT_TRUE(joined.ok());
  // Iterations 6..resumed: r1's copies alone.
  for (std::uint64_t it = 6; it <= resumed; ++it) EXPECT_EQ(pushed.at(it).size(), 2u) << it;
  const auto reference = Reference(pushed, kLast);
  for (const InProcessWorker* w : {&r1[0], &r1[1], &joiner}) {
    for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
      for (std::uint64_t i = 0; i < kSizes[t]; ++i) {
        ASSERT_LE(std::abs(w->weights[t][i] - reference[t][i]),
                  1e-5 + 1e-4 * std::abs(reference[t][i]))
            << (w == &joiner ? "the joiner" : "rack r1") << ": tensor " << t << "[" << i
            << "]: got " << w->weights[t][i] << ", reference " << reference[t][i];
      }
    }
  }
  EXPECT_EQ(r1[0].weights, joiner.weights);
  EXPECT_TRUE(joiner.client->Close().ok());
  for (auto& w : r1) EXPECT_TRUE(w.client->Close().ok());
}

// A chunk's home, driven by two forged PBoxes (rack r0 of 2 workers, r1 of 1): it divides by
// the counts their sums carry (2 copies, not the job's 3 workers), passes an iteration whose counts
// are all 0 without a step, and refuses a count beyond the sender's rack (5 copies of 5 members
// from a rack of 1), naming it, without ever dividing by it.
TEST(ElasticRacksTest, AHomeDividesByTheCountsItIsSentAndRefusesACountNoRackHas) {
  ForgedPboxes forged;
  forged.Start(kernels::LrScaling::kFixed);
  auto& [dir, home, weights, pboxes] = forged;
  constexpr std::uint32_t kElements = ForgedPboxes::kElements;
  ASSERT_TRUE(pboxes[0] && pboxes[1]) << ReadFile(home.log_path);
  ASSERT_EQ(weights[1], weights[0]);
  // Each PBox's sum: every element `value`, its counts last (copies, and members: as many
  // here). The client reads the buffer until the push's Wait: one per PBox, kept.
  std::vector<std::vector<float>> sums(2, std::vector<float>(kElements + server::kCountElements));
  const auto push = [&](std::uint32_t r, float value, float count) {
    std::fill(sums[r].begin(), sums[r].end(), value);
    sums[r][kElements] = count;
    sums[r][kElements + 1] = count;
    EXPECT_TRUE(pboxes[r]->Push(0, sums[r]).ok());
  };
  push(0, 1.0f, 1);  // rack r0: one of its 2 workers' copies, of 1
  push(1, 4.0f, 1);  // rack r1: its one copy, of 4
  for (auto& p : pboxes) ASSERT_TRUE(p->Wait(0).ok()) << ReadFile(home.log_path);
  for (std::uint32_t i = 0; i < kElements; ++i) {
    // lr 1: w - (1 + 4) / 2 copies (the job's most workers, 3, would give 5/3).
    ASSERT_EQ(weights[0][i], 1.0f + static_cast<float>(i) - 2.5f) << i;
  }
  EXPECT_EQ(weights[0][kElements], 0.0f) << "the count's slot is no weight";
  EXPECT_EQ(weights[0][kElements + 1], 0.0f) << "the members' slot is no weight";
  const std::vector<float> before = weights[0];
  push(0, 0.0f, 0);
  push(1, 0.0f, 0);
  for (auto& p : pboxes) ASSERT_TRUE(p->Wait(0).ok()) << ReadFile(home.log_path);
  EXPECT_EQ(weights[0], before) << "an iteration of no copies moved the weights";
  push(0, 3.0f, 1);
  push(1, 5.0f, 5);  // a rack of 1 worker claims 5 copies of 5 members
  EXPECT_FALSE(pboxes[1]->Wait(0).ok()) << "a count beyond the sender's rack was taken";
  EXPECT_TRUE(WaitFor(
      [&] {
        return ReadFile(home.log_path)
                   .find(
                       "its count of members is 5, not a whole number of 0 "
                       "to 1") != std::string::npos;
      },
      std::chrono::milliseconds(10000)))
      << ReadFile(home.log_path);
  EXPECT_FALSE(pboxes[0]->Wait(0).ok()) << "the home stepped without rack r1's sum";
  EXPECT_TRUE(home.process.Running());
}

// A PBox of an earlier release joins a home part without saying its sums carry a count: the
// home would take a weight for one, so it refuses, saying to run one release everywhere.
TEST(ElasticRacksTest, AHomeRefusesAPboxWhoseSumsCarryNoCount) {
  TempDir dir;
  RackPhubds pboxes(dir, {});
  proto::Hello hello = MakeHello(1, kRacks, {{"t0@0", 66}});
  hello.set_racks(kRacks);
  hello.set_rack(1);
  hello.set_rack_workers(kHosts[1]);
  RawSocket socket = RawSocket::Connect(pboxes.ports[0], Millis(5000));
  ASSERT_TRUE(socket.connected());
  ASSERT_TRUE(socket.SendMessage(Wrap(hello)));
  proto::ControlMessage reply;
  ASSERT_EQ(socket.ReadMessage(reply, Millis(15000)), RawSocket::Read::kOk) << pboxes.Logs();
  ASSERT_TRUE(reply.has_error()) << reply.DebugString();
  EXPECT_EQ(reply.error().code(), proto::Error::BAD_REQUEST);
  EXPECT_THAT(reply.error().message(), ::testing::HasSubstr("without their count of copies"));
  EXPECT_THAT(reply.error().fix(), ::testing::HasSubstr("same PHub release"));
}

}  // namespace
}  // namespace phub::testing
