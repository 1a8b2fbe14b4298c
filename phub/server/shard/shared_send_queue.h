// SharedSendQueue: one core's FairSendQueue shared by the threads of the jobs on that core
// (core_lane.h: each job's shard runs on a thread of its own). The queue's order and pacing are
// FairSendQueue's; this class adds the lock and says on which thread each unit starts: a unit
// is started on its flow's own thread (FlowHome), never on the thread whose Submit, Done or
// wake-up made its turn come, because the unit touches its shard, which only its thread may.
//
// Units are taken from the queue under the lock and started after it is released, so a start
// that submits or completes at once re-enters freely. A unit posted to its thread starts there
// only if its flow is still in the queue then: a job's thread removes its flow before it frees
// its shard, on that same thread, so a unit that runs finds its shard alive.
//
// Threading: every call from any thread. `wake` and FlowHome::post are called under the lock
// and must only post (arm a timer, queue a function); Wake() comes later, from any thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "phub/server/shard/fair_send_queue.h"

namespace phub::server {

class SharedSendQueue {
 public:
  using FlowId = FairSendQueue::FlowId;
  // Where a flow's units start: `here` is true on the flow's thread; `post` runs a function
  // there later.
  struct FlowHome {
    std::function<bool()> here;
    std::function<void(std::function<void()>)> post;
  };

  explicit SharedSendQueue(FairPacing pacing,
                           std::function<void(std::chrono::nanoseconds)> wake = nullptr,
                           std::function<FairSendQueue::Clock::time_point()> now = nullptr);

  void AddFlow(FlowId flow, double weight, FlowHome home);
  // On the flow's own thread: once it returns no unit of the flow starts any more.
  void RemoveFlow(FlowId flow);
  // FairSendQueue's, from any thread; `start` runs on the flow's thread.
  bool Submit(FlowId flow, std::size_t bytes, std::function<void()> start);
  void Done(FlowId flow, std::size_t bytes);
  void Wake();

  const FairPacing& pacing() const { return queue_.pacing(); }
  std::uint64_t started_bytes(FlowId flow) const;

 private:
  struct Ready {
    FlowId flow;
    std::function<void()> start;
  };
  // Starts what the queue let go (called with the lock released).
  void StartReady(std::vector<Ready> ready);
  bool Has(FlowId flow) const;

  mutable std::mutex mu_;
  FairSendQueue queue_;               // guarded by mu_
  std::map<FlowId, FlowHome> homes_;  // guarded by mu_
  std::vector<Ready> ready_;          // guarded by mu_: units whose turn came, not started
};

}  // namespace phub::server
