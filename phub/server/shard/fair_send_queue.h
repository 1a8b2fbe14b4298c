// FairSendQueue: one core's sends shared among the jobs it serves, by weighted fair queueing at
// chunk granularity (start-time fair queueing, Goyal, Vin and Cheng, SIGCOMM'96).
//
// A job's shard submits each chunk broadcast (the weights of one chunk to every worker) as one
// unit of `bytes`. A unit of flow f gets start = max(virtual time, f's previous finish) if f was
// idle (nothing queued, nothing in flight), else f's previous finish; finish = start + bytes /
// weight; virtual time is the start tag of the unit last started. Units start in start-tag
// order, so backlogged flows get the core's sends in proportion to their weights and an idle
// flow banks no credit.
//
// When units start is what makes that order a share of the NIC, and it is the operator's to say
// (Pacing): phubd cannot tell whether its NIC is the bottleneck or each job's own links are.
// With a rate, while two or more flows are active the queue starts units no faster than the
// rate (a token bucket of `burst`), so the backlog forms here, where it is served by weight,
// instead of in the sockets, where TCP would share it per connection; a flow that uses less than
// its share leaves the rest to the others (work-conserving up to the rate). Without a rate, or
// with one flow active, units start at once: the order is kept, nothing is held — a job alone
// gets all of the core, always. A flow whose sends have been in flight for `stalled_after` (or 4x
// their time at the rate) with none completing (its workers read nothing) is not active: a
// tenant cannot hold the others to a shared pace by not reading its weights.
//
// Threading: the core's thread only. `wake` asks to be called back (Wake()) after a delay: the
// core arms a timer on its loop. Units of a flow removed (its job ended) never start; Done for
// a removed flow is ignored.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>

namespace phub::server {

// What a core's sends may use while jobs share it (FairSendQueue::Pacing).
struct FairPacing {
  double bytes_per_s = 0;  // this core's share of the NIC; 0: never held
  std::chrono::nanoseconds burst = std::chrono::milliseconds(2);  // tokens kept, at most
  // A flow with sends in flight and none completed for this long counts as not active — or
  // for 4x what its bytes in flight take at `bytes_per_s`, if that is longer (a unit is one
  // chunk to every worker of the job, and may itself take ~100 ms on a slow link).
  std::chrono::nanoseconds stalled_after = std::chrono::milliseconds(100);
};

class FairSendQueue {
 public:
  using FlowId = std::uint64_t;
  using Clock = std::chrono::steady_clock;
  using Pacing = FairPacing;
  explicit FairSendQueue(Pacing pacing = Pacing(),
                         std::function<void(std::chrono::nanoseconds)> wake = nullptr,
                         std::function<Clock::time_point()> now = nullptr);

  void AddFlow(FlowId flow, double weight);
  void RemoveFlow(FlowId flow);
  // Runs `start` (now, or when the flow's turn comes); the caller reports Done(flow, bytes)
  // once what it started has completed (a flow with bytes in flight is still active). False,
  // and `start` dropped, for a flow not (or no longer) added.
  bool Submit(FlowId flow, std::size_t bytes, std::function<void()> start);
  void Done(FlowId flow, std::size_t bytes);
  // The delay asked for through `wake` has passed.
  void Wake();

  const Pacing& pacing() const { return pacing_; }
  std::size_t in_flight_bytes() const { return in_flight_bytes_; }
  std::size_t queued(FlowId flow) const;
  // Bytes started per flow since AddFlow (what the tests read shares from).
  std::uint64_t started_bytes(FlowId flow) const;

 private:
  struct Unit {
    double start_tag;
    std::size_t bytes;
    std::function<void()> start;
  };
  struct Flow {
    double weight = 1;
    double last_finish = 0;
    std::size_t in_flight = 0;
    std::uint64_t started = 0;
    Clock::time_point progressed{};  // its last start from idle, or its last Done
    std::deque<Unit> queue;
  };
  void Pump();
  std::size_t ActiveFlows(Clock::time_point now) const;
  void Refill(Clock::time_point now);

  Pacing pacing_;
  std::function<void(std::chrono::nanoseconds)> wake_;
  std::function<Clock::time_point()> now_;
  std::map<FlowId, Flow> flows_;
  double virtual_time_ = 0;
  std::size_t in_flight_bytes_ = 0;
  double tokens_ = 0;  // bytes that may start now; negative: owed
  Clock::time_point refilled_{};
  bool wake_pending_ = false;
  bool pumping_ = false;
};

}  // namespace phub::server
