// FairSendQueue: one core's sends shared among the jobs it serves, by weighted fair queueing at
// chunk granularity (start-time fair queueing, Goyal et al., SIGCOMM'96).
//
// A job's shard submits each chunk broadcast (the weights of one chunk to every worker) as one
// unit of `bytes`; the queue starts units while the bytes started and not yet done stay within
// the window, choosing the unit with the smallest start tag: a flow's unit gets
// start = max(virtual time, the flow's previous finish) and finish = start + bytes / weight, and
// virtual time is the start tag of the unit last started (a flow with units queued or in flight
// is busy and goes on from its previous finish; only an idle one is brought up to virtual time).
// Backlogged flows thus get the core's sends in proportion to their weights, an idle flow banks
// no credit, and a flow alone is never held (with one active flow the window does not apply: a
// job alone gets all of the core).
//
// The window bounds what the gate has let through and not yet seen complete (Done): below the
// gate the transports queue only what SendScheduler's window and TCP_NOTSENT_LOWAT allow, so
// the order units start in is the order the NIC serves them.
//
// Threading: the core's thread only. Units of a flow removed (its job ended) never start;
// Done for a removed flow is ignored.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>

namespace phub::server {

class FairSendQueue {
 public:
  using FlowId = std::uint64_t;
  // `window_bytes`: bytes started and not done, at most, while two or more flows are active
  // (at least one unit always runs).
  explicit FairSendQueue(std::size_t window_bytes) : window_bytes_(window_bytes) {}

  void AddFlow(FlowId flow, double weight);
  void RemoveFlow(FlowId flow);
  // Runs `start` (now, or when the flow's turn comes); the caller reports Done(flow, bytes)
  // once what it started has completed.
  void Submit(FlowId flow, std::size_t bytes, std::function<void()> start);
  void Done(FlowId flow, std::size_t bytes);

  std::size_t in_flight_bytes() const { return in_flight_bytes_; }
  std::size_t queued(FlowId flow) const;
  // Bytes started per flow since AddFlow (what the bench and tests read shares from).
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
    std::deque<Unit> queue;
  };
  void Pump();
  std::size_t ActiveFlows() const;

  std::size_t window_bytes_;
  std::map<FlowId, Flow> flows_;
  double virtual_time_ = 0;
  std::size_t in_flight_bytes_ = 0;
  bool pumping_ = false;
};

}  // namespace phub::server
