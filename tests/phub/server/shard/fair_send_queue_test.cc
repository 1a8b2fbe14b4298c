// FairSendQueue on a simulated clock: shares against the weights (a naive count of bytes
// started), pacing to the rate, work conservation when a flow uses less than its share, no
// credit for idling, and a job alone never held.
#include "phub/server/shard/fair_send_queue.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <tuple>
#include <random>
#include <vector>

namespace phub::server {
namespace {

using Clock = FairSendQueue::Clock;
using std::chrono::nanoseconds;

// A queue paced at `rate` bytes/s on a clock the test moves. A started unit completes (Done,
// then its `also`) at the next Advance, which then delivers the wake-up the queue asked for.
struct Simulation {
  Clock::time_point now{};
  std::optional<Clock::time_point> wake_at;
  FairSendQueue queue;
  std::vector<std::tuple<FairSendQueue::FlowId, std::size_t, std::function<void()>>> started;

  explicit Simulation(double rate)
      : queue(FairSendQueue::Pacing{.bytes_per_s = rate},
              [this](nanoseconds delay) { wake_at = now + delay; }, [this] { return now; }) {}

  void Submit(FairSendQueue::FlowId flow, std::size_t bytes, std::function<void()> also = {}) {
    queue.Submit(flow, bytes, [this, flow, bytes, also] { started.emplace_back(flow, bytes, also); });
  }
  // Completes what started, moves the clock to the queue's wake-up (or by `step` if it asked
  // none) and wakes it.
  void Advance(nanoseconds step = std::chrono::milliseconds(1)) {
    auto done = std::move(started);
    started.clear();
    for (auto& [flow, bytes, also] : done) {
      if (also) also();  // refills first: the flow stays active
      queue.Done(flow, bytes);
    }
    now = wake_at.value_or(now + step);
    wake_at.reset();
    queue.Wake();
  }
};

TEST(FairSendQueueTest, BackloggedFlowsShareInProportionToTheirWeightsAtTheRate) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const double rate = 100e6;  // bytes/s
    Simulation sim(rate);
    const int flows = 2 + static_cast<int>(rng() % 3);
    std::vector<double> weight(flows);
    std::vector<std::size_t> unit(flows);
    for (int f = 0; f < flows; ++f) {
      weight[f] = 1 + static_cast<double>(rng() % 4);   // 1..4
      unit[f] = (64u << 10) * (1 + rng() % 16);          // 64 KiB .. 1 MiB
      sim.queue.AddFlow(f, weight[f]);
    }
    // Every flow keeps 4 units queued: backlogged. (Armed once all are in: a flow alone is
    // never held, and one whose starts refill it would never stop.)
    bool armed = false;
    std::function<void(int)> refill = [&](int f) {
      for (int i = 0; armed && i < 4 && sim.queue.queued(f) < 4; ++i) {
        sim.Submit(f, unit[f], [&refill, f] { refill(f); });
      }
    };
    for (int f = 0; f < flows; ++f) sim.Submit(f, unit[f], [&refill, f] { refill(f); });
    armed = true;
    for (int f = 0; f < flows; ++f) refill(f);
    const Clock::time_point begin = sim.now;
    std::map<int, std::uint64_t> before;
    for (int f = 0; f < flows; ++f) before[f] = sim.queue.started_bytes(f);
    for (int step = 0; step < 5000; ++step) sim.Advance();
    const double seconds = std::chrono::duration<double>(sim.now - begin).count();
    double total_weight = 0, total = 0;
    for (int f = 0; f < flows; ++f) {
      total_weight += weight[f];
      total += static_cast<double>(sim.queue.started_bytes(f) - before[f]);
    }
    EXPECT_NEAR(total / seconds, rate, 0.02 * rate) << "trial " << trial << ": not the rate";
    for (int f = 0; f < flows; ++f) {
      const double share = static_cast<double>(sim.queue.started_bytes(f) - before[f]) / total;
      EXPECT_NEAR(share, weight[f] / total_weight, 0.02)
          << "trial " << trial << ", flow " << f << " of weight " << weight[f] << " (units of "
          << unit[f] << " bytes)";
    }
  }
}

TEST(FairSendQueueTest, AFlowThatUsesLessThanItsShareLeavesTheRestToTheOthers) {
  // Flow 1 (weight 2) always has a unit on its way but a new one only every 10 ms (10 % of the
  // rate: its own links are slow); flow 2 (weight 1) is backlogged: it gets the other 90 %,
  // not the third its weight alone would say.
  const double rate = 100e6;
  Simulation sim(rate);
  sim.queue.AddFlow(1, 2);
  sim.queue.AddFlow(2, 1);
  bool armed = false;
  std::function<void()> refill2 = [&] {
    for (int i = 0; armed && i < 4 && sim.queue.queued(2) < 4; ++i) {
      sim.Submit(2, 100000, [&] { refill2(); });
    }
  };
  sim.queue.Submit(1, 100000, [] {});  // completes only when the next one comes: always active
  armed = true;
  refill2();
  Clock::time_point next1 = sim.now + std::chrono::milliseconds(10);
  for (int step = 0; step < 4000; ++step) {
    if (sim.now >= next1) {
      sim.queue.Submit(1, 100000, [] {});
      sim.queue.Done(1, 100000);  // the previous one
      next1 += std::chrono::milliseconds(10);
    }
    sim.Advance(std::chrono::microseconds(100));
  }
  const double seconds = std::chrono::duration<double>(sim.now - Clock::time_point{}).count();
  EXPECT_NEAR(sim.queue.started_bytes(1) / seconds, 0.1 * rate, 0.02 * rate);
  EXPECT_NEAR(sim.queue.started_bytes(2) / seconds, 0.9 * rate, 0.03 * rate);
}

TEST(FairSendQueueTest, AFlowAloneIsNeverHeld) {
  Simulation sim(1e6);  // 1 MB/s: 50 units of 1 MiB would take 50 s if paced
  sim.queue.AddFlow(1, 1);
  int started = 0;
  for (int k = 0; k < 50; ++k) sim.queue.Submit(1, 1u << 20, [&] { ++started; });
  EXPECT_EQ(started, 50);  // all in flight at once
  EXPECT_FALSE(sim.wake_at.has_value());
  // Nor does it leave a debt behind: a second flow's first unit starts at once.
  sim.queue.AddFlow(2, 1);
  bool second = false;
  sim.queue.Submit(2, 1000, [&] { second = true; });
  EXPECT_TRUE(second);
}

TEST(FairSendQueueTest, WithoutARateNothingIsHeldButTheOrderIsKept) {
  FairSendQueue queue;  // no pacing
  queue.AddFlow(1, 1);
  queue.AddFlow(2, 1);
  std::vector<int> order;
  // Both flows active (units in flight, never Done): still nothing is held.
  for (int k = 0; k < 3; ++k) queue.Submit(1, 100, [&] { order.push_back(1); });
  for (int k = 0; k < 3; ++k) queue.Submit(2, 100, [&] { order.push_back(2); });
  EXPECT_EQ(order.size(), 6u);
}

TEST(FairSendQueueTest, AnIdleFlowBanksNoCredit) {
  // Flow 2 idles while flow 1 sends alone; when it wakes it must not get the rate for as long
  // as flow 1 had it: from there on the two alternate.
  Simulation sim(100e6);
  sim.queue.AddFlow(1, 1);
  sim.queue.AddFlow(2, 1);
  for (int k = 0; k < 100; ++k) sim.Submit(1, 100000);  // alone: all start, none held
  bool armed = false;
  std::function<void(int)> refill = [&](int f) {
    for (int i = 0; armed && i < 4 && sim.queue.queued(f) < 4; ++i) {
      sim.Submit(f, 100000, [&refill, f] { refill(f); });
    }
  };
  sim.Submit(2, 100000, [&] { refill(2); });  // flow 2 wakes: starts at once (flow 1 is idle)
  sim.Submit(1, 100000, [&] { refill(1); });
  armed = true;
  refill(1);
  refill(2);
  const auto before1 = sim.queue.started_bytes(1), before2 = sim.queue.started_bytes(2);
  for (int step = 0; step < 40; ++step) sim.Advance();
  const double got1 = sim.queue.started_bytes(1) - before1;
  const double got2 = sim.queue.started_bytes(2) - before2;
  EXPECT_NEAR(got2 / (got1 + got2), 0.5, 0.05);
}

TEST(FairSendQueueTest, ARemovedFlowsUnitsNeverStartAndItsDoneIsIgnored) {
  Simulation sim(1000);  // 1 kB/s: once both are active, one unit and then nothing for long
  sim.queue.AddFlow(1, 1);
  sim.queue.AddFlow(2, 1);
  bool second_of_1 = false, second_of_2 = false;
  sim.queue.Submit(1, 800, [] {});                          // alone: starts (never Done)
  sim.queue.Submit(2, 800, [] {});                          // the bucket's burst: starts
  sim.queue.Submit(1, 800, [&] { second_of_1 = true; });    // paced: held
  sim.queue.Submit(2, 800, [&] { second_of_2 = true; });    // held
  EXPECT_FALSE(second_of_1);
  EXPECT_FALSE(second_of_2);
  sim.queue.RemoveFlow(1);  // its unit in flight forgotten, its queued one dropped
  EXPECT_TRUE(second_of_2);  // alone now: not held
  EXPECT_FALSE(second_of_1);
  sim.queue.Done(1, 800);    // a late completion of the removed flow
  EXPECT_EQ(sim.queue.in_flight_bytes(), 1600u);
  sim.queue.Submit(1, 10, [&] { second_of_1 = true; });  // unknown flow: dropped
  EXPECT_FALSE(second_of_1);
}

TEST(FairSendQueueTest, AFlowWhoseReadersStoppedIsNotActive) {
  // Flow 1's workers read nothing: its unit stays in flight, never Done. While that is recent
  // flow 2 is paced as a sharer; once nothing of flow 1 completed for `stalled_after` flow 2 is
  // alone again and held no longer. A Done of flow 1 makes it active again.
  Simulation sim(1e6);  // 1 MB/s
  const auto stalled = sim.queue.pacing().stalled_after;
  sim.queue.AddFlow(1, 1);
  sim.queue.AddFlow(2, 1);
  sim.queue.Submit(1, 1000, [] {});  // in flight for good
  int started = 0;
  for (int k = 0; k < 10; ++k) sim.queue.Submit(2, 1u << 20, [&] { ++started; });
  EXPECT_LT(started, 10) << "flow 1 has just started: flow 2 shares the rate";
  EXPECT_TRUE(sim.wake_at.has_value());
  sim.now += stalled + std::chrono::milliseconds(1);
  sim.wake_at.reset();
  sim.queue.Wake();
  EXPECT_EQ(started, 10) << "flow 1 stalled: flow 2 is alone and not held";
  for (int k = 0; k < 10; ++k) sim.queue.Submit(2, 1u << 20, [&] { ++started; });
  EXPECT_EQ(started, 20);
  // Flow 1's reader wakes: its Done makes it a sharer again, and flow 2 is paced.
  sim.queue.Done(1, 1000);
  sim.queue.Submit(1, 1000, [] {});
  const int before = started;
  for (int k = 0; k < 10; ++k) sim.queue.Submit(2, 1u << 20, [&] { ++started; });
  EXPECT_LT(started - before, 10);
}

TEST(FairSendQueueTest, ALongUnitInFlightIsNotTakenForAStall) {
  // 10 MB/s: a unit of 2 MB takes 200 ms, over stalled_after (100 ms). Flow 1 with such a unit
  // in flight 150 ms is still sending: flow 2 stays paced. After 4x its time (800 ms) with no
  // completion, flow 1 is stalled.
  Simulation sim(10e6);
  sim.queue.AddFlow(1, 1);
  sim.queue.AddFlow(2, 1);
  sim.queue.Submit(1, 2'000'000, [] {});
  int started = 0;
  for (int k = 0; k < 10; ++k) sim.queue.Submit(2, 100'000, [&] { ++started; });
  const int at_start = started;
  EXPECT_LT(at_start, 10);
  sim.now += std::chrono::milliseconds(150);
  sim.queue.Wake();
  EXPECT_LT(started, 10) << "a 200 ms unit 150 ms in flight is not a stall";
  sim.now += std::chrono::milliseconds(700);
  sim.queue.Wake();
  EXPECT_EQ(started, 10) << "no completion for over 4x its time: stalled";
}

TEST(FairSendQueueTest, AUnitThatCompletesAtOnceDoesNotRecurse) {
  FairSendQueue queue;
  queue.AddFlow(1, 1);
  queue.AddFlow(2, 1);
  int started = 0;
  // Each start completes synchronously (a send that failed at once) and submits the next.
  std::function<void(FairSendQueue::FlowId)> submit = [&](FairSendQueue::FlowId flow) {
    queue.Submit(flow, 60, [&, flow] {
      if (++started < 1000) submit(flow);
      queue.Done(flow, 60);
    });
  };
  submit(1);
  submit(2);
  EXPECT_GE(started, 1000);
  EXPECT_EQ(queue.in_flight_bytes(), 0u);
}

}  // namespace
}  // namespace phub::server
