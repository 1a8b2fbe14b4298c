// SharedSendQueue: a unit starts on its own flow's thread whoever's call let it go; a unit
// posted to a flow that is removed before it runs never starts; many threads submitting and
// completing at once keep the queue's counts (run under TSan in CI).
#include "phub/server/shard/shared_send_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>
#include <vector>

#include "phub/transport/event_loop.h"

namespace phub::server {
namespace {

using Clock = FairSendQueue::Clock;

SharedSendQueue::FlowHome HomeOn(transport::EventLoop& loop) {
  return {.here = [&loop] { return loop.on_loop_thread(); },
          .post = [&loop](std::function<void()> fn) { loop.Post(std::move(fn)); }};
}

// 1 kB/s on a clock the test moves: once two flows are active a unit past the burst is held
// until the test moves the clock and wakes the queue.
struct Paced {
  std::atomic<std::int64_t> now_ns{0};
  SharedSendQueue queue{FairPacing{.bytes_per_s = 1000}, [](std::chrono::nanoseconds) {},
                        [this] { return Clock::time_point(std::chrono::nanoseconds(now_ns)); }};
};

TEST(SharedSendQueueTest, AUnitStartsOnItsFlowsThreadWhoeverLetsItGo) {
  Paced paced;
  transport::EventLoop one("flow 1", -1), two("flow 2", -1);
  paced.queue.AddFlow(1, 1, HomeOn(one));
  paced.queue.AddFlow(2, 1, HomeOn(two));
  std::promise<std::thread::id> held_started_on;
  one.Run([&] { paced.queue.Submit(1, 1000, [] {}); });  // alone: starts; stays in flight
  two.Run([&] {
    ASSERT_TRUE(paced.queue.Submit(2, 1000, [] {}));  // the burst's: starts
    ASSERT_TRUE(paced.queue.Submit(2, 1000, [&] {
      held_started_on.set_value(std::this_thread::get_id());
    }));  // held: both flows active, no tokens left
  });
  auto started = held_started_on.get_future();
  EXPECT_EQ(started.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  // Two seconds later the tokens are back: the test's thread wakes the queue, flow 2's unit
  // starts on flow 2's thread.
  paced.now_ns += 2'000'000'000;
  paced.queue.Wake();
  ASSERT_EQ(started.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  std::thread::id two_id;
  two.Run([&] { two_id = std::this_thread::get_id(); });
  EXPECT_EQ(started.get(), two_id);
  one.Run([&] { paced.queue.RemoveFlow(1); });
  two.Run([&] { paced.queue.RemoveFlow(2); });
}

TEST(SharedSendQueueTest, AUnitPostedToAFlowRemovedBeforeItRunsNeverStarts) {
  Paced paced;
  transport::EventLoop one("flow 1", -1), two("flow 2", -1);
  paced.queue.AddFlow(1, 1, HomeOn(one));
  paced.queue.AddFlow(2, 1, HomeOn(two));
  std::atomic<bool> late_start{false};
  one.Run([&] { paced.queue.Submit(1, 1000, [] {}); });
  two.Run([&] {
    paced.queue.Submit(2, 1000, [] {});
    paced.queue.Submit(2, 1000, [&] { late_start = true; });  // held
  });
  // Flow 2's thread is busy when the unit's turn comes: the unit is queued behind; meanwhile
  // flow 2's job ends there (its flow removed first, as a lane does before freeing its shard).
  std::promise<void> woken;
  two.Post([&] {
    woken.get_future().wait();
    paced.queue.RemoveFlow(2);
  });
  paced.now_ns += 2'000'000'000;
  paced.queue.Wake();  // posts the unit to flow 2's thread, behind the task above
  woken.set_value();
  two.Run([] {});  // both ran
  EXPECT_FALSE(late_start);
  one.Run([&] { paced.queue.RemoveFlow(1); });
}

TEST(SharedSendQueueTest, ThreadsSubmittingAndCompletingAtOnceKeepTheCounts) {
  SharedSendQueue queue(FairPacing{.bytes_per_s = 1e12});  // paced, but never short
  constexpr int kFlows = 4, kUnits = 2000;
  std::vector<std::unique_ptr<transport::EventLoop>> loops;
  for (int f = 0; f < kFlows; ++f) {
    loops.push_back(std::make_unique<transport::EventLoop>("flow", -1));
    queue.AddFlow(f, 1 + f, HomeOn(*loops.back()));
  }
  std::atomic<int> started{0};
  std::vector<std::thread> threads;
  for (int f = 0; f < kFlows; ++f) {
    threads.emplace_back([&, f] {
      for (int k = 0; k < kUnits; ++k) {
        queue.Submit(f, 100, [&, f] {
          ++started;
          queue.Done(f, 100);  // completes at once, from the flow's thread
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& loop : loops) loop->Run([] {});  // what was posted has run
  EXPECT_EQ(started.load(), kFlows * kUnits);
  for (int f = 0; f < kFlows; ++f) EXPECT_EQ(queue.started_bytes(f), 100u * kUnits);
  for (int f = 0; f < kFlows; ++f) loops[f]->Run([&] { queue.RemoveFlow(f); });
}

}  // namespace
}  // namespace phub::server
