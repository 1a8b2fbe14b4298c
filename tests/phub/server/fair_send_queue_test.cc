// FairSendQueue against a naive reference: a link that drains what the gate let through in
// order, one byte per tick, with every flow backlogged; shares are compared with the weights.
#include "phub/server/fair_send_queue.h"

#include <gtest/gtest.h>

#include <deque>
#include <map>
#include <random>
#include <vector>

namespace phub::server {
namespace {

// Units started, in order, with the link completing them FIFO (what a NIC below the window
// does); each flow keeps units queued at the gate at all times (backlogged: more than the
// window holds), else the flows' own outstanding bytes, not the queue, would set the shares.
struct Simulation {
  FairSendQueue queue;
  std::deque<std::pair<FairSendQueue::FlowId, std::size_t>> link;  // started, not done
  std::map<FairSendQueue::FlowId, std::uint64_t> served;           // bytes completed

  explicit Simulation(std::size_t window) : queue(window) {}

  void Submit(FairSendQueue::FlowId flow, std::size_t bytes) {
    queue.Submit(flow, bytes, [this, flow, bytes] { link.emplace_back(flow, bytes); });
  }
  // Completes the oldest started unit; with `refill` its flow tops its queue up to 4 units.
  void CompleteOne(bool refill = true) {
    ASSERT_FALSE(link.empty());
    auto [flow, bytes] = link.front();
    link.pop_front();
    served[flow] += bytes;
    for (int i = 0; refill && i < 4 && queue.queued(flow) < 4; ++i) Submit(flow, bytes);
    queue.Done(flow, bytes);
  }
};

TEST(FairSendQueueTest, BackloggedFlowsShareInProportionToTheirWeights) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const int flows = 2 + static_cast<int>(rng() % 3);
    std::vector<double> weight(flows);
    std::vector<std::size_t> unit(flows);
    Simulation sim(/*window=*/3u << 20);
    for (int f = 0; f < flows; ++f) {
      weight[f] = 1 + static_cast<double>(rng() % 4);            // 1..4
      unit[f] = (64u << 10) * (1 + rng() % 16);                   // 64 KiB .. 1 MiB
      sim.queue.AddFlow(f, weight[f]);
    }
    for (int f = 0; f < flows; ++f) {
      for (int k = 0; k < 4; ++k) sim.Submit(f, unit[f]);
    }
    for (int step = 0; step < 20000; ++step) sim.CompleteOne();
    double total_weight = 0, total_served = 0;
    for (int f = 0; f < flows; ++f) {
      total_weight += weight[f];
      total_served += static_cast<double>(sim.served[f]);
    }
    for (int f = 0; f < flows; ++f) {
      const double share = static_cast<double>(sim.served[f]) / total_served;
      EXPECT_NEAR(share, weight[f] / total_weight, 0.02)
          << "trial " << trial << ", flow " << f << " of weight " << weight[f] << " (units of "
          << unit[f] << " bytes)";
    }
  }
}

TEST(FairSendQueueTest, AFlowAloneIsNeverHeld) {
  FairSendQueue queue(1u << 20);
  queue.AddFlow(1, 1);
  int started = 0;
  for (int k = 0; k < 50; ++k) queue.Submit(1, 1u << 20, [&] { ++started; });
  EXPECT_EQ(started, 50);  // far past the window: alone, the window does not apply
  EXPECT_EQ(queue.in_flight_bytes(), 50u << 20);
}

TEST(FairSendQueueTest, SharedFlowsAreHeldAtTheWindowButOneUnitAlwaysRuns) {
  FairSendQueue queue(1u << 20);
  queue.AddFlow(1, 1);
  queue.AddFlow(2, 1);
  int started = 0;
  queue.Submit(1, 4u << 20, [&] { ++started; });  // larger than the window: still starts
  queue.Submit(2, 4u << 20, [&] { ++started; });  // both flows active now: held
  EXPECT_EQ(started, 1);
  queue.Done(1, 4u << 20);
  EXPECT_EQ(started, 2);
}

TEST(FairSendQueueTest, AnIdleFlowBanksNoCredit) {
  // Flow 2 idles while flow 1 sends 100 units alone; when it wakes it must not then get the
  // link for 100 units in a row: from there on the two alternate.
  Simulation sim(1);  // one unit at a time once both are active
  sim.queue.AddFlow(1, 1);
  sim.queue.AddFlow(2, 1);
  sim.Submit(1, 1000);
  for (int step = 0; step < 100; ++step) {
    sim.Submit(1, 1000);  // one more each time one completes: never more than 2 outstanding
    sim.CompleteOne(/*refill=*/false);
  }
  for (int k = 0; k < 4; ++k) sim.Submit(2, 1000);
  for (int k = 0; k < 4; ++k) sim.Submit(1, 1000);
  sim.served.clear();
  for (int step = 0; step < 40; ++step) sim.CompleteOne();
  EXPECT_NEAR(static_cast<double>(sim.served[2]) / (sim.served[1] + sim.served[2]), 0.5, 0.05);
}

TEST(FairSendQueueTest, ARemovedFlowsUnitsNeverStartAndItsDoneIsIgnored) {
  FairSendQueue queue(1000);
  queue.AddFlow(1, 1);
  queue.AddFlow(2, 1);
  bool second_of_1 = false, first_of_2 = false;
  queue.Submit(1, 800, [] {});                          // alone: starts
  queue.Submit(2, 800, [&] { first_of_2 = true; });     // both active, window full: held
  queue.Submit(1, 800, [&] { second_of_1 = true; });    // held
  EXPECT_FALSE(first_of_2);
  queue.RemoveFlow(1);  // its unit in flight is forgotten, its queued one dropped
  EXPECT_TRUE(first_of_2);
  EXPECT_FALSE(second_of_1);
  queue.Done(1, 800);  // a late completion of the removed flow
  EXPECT_EQ(queue.in_flight_bytes(), 800u);
  EXPECT_EQ(queue.started_bytes(2), 800u);
  queue.Submit(1, 10, [&] { second_of_1 = true; });  // unknown flow: dropped
  EXPECT_FALSE(second_of_1);
}

TEST(FairSendQueueTest, AUnitThatCompletesAtOnceDoesNotRecurse) {
  FairSendQueue queue(100);
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
