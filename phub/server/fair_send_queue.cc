#include "phub/server/fair_send_queue.h"

#include <algorithm>
#include <limits>

namespace phub::server {

void FairSendQueue::AddFlow(FlowId flow, double weight) {
  Flow& f = flows_[flow];
  f.weight = weight > 0 ? weight : 1;
  f.last_finish = virtual_time_;
}

void FairSendQueue::RemoveFlow(FlowId flow) {
  auto it = flows_.find(flow);
  if (it == flows_.end()) return;
  in_flight_bytes_ -= std::min(in_flight_bytes_, it->second.in_flight);
  flows_.erase(it);
  Pump();  // what it held back others may now use
}

std::size_t FairSendQueue::queued(FlowId flow) const {
  auto it = flows_.find(flow);
  return it == flows_.end() ? 0 : it->second.queue.size();
}

std::uint64_t FairSendQueue::started_bytes(FlowId flow) const {
  auto it = flows_.find(flow);
  return it == flows_.end() ? 0 : it->second.started;
}

void FairSendQueue::Submit(FlowId flow, std::size_t bytes, std::function<void()> start) {
  auto it = flows_.find(flow);
  if (it == flows_.end()) return;  // its job is gone
  Flow& f = it->second;
  // A flow that was idle (nothing queued, nothing in flight) starts at the current virtual
  // time: no credit for the idle spell. A busy one goes on from its last finish, even when all
  // it had is past the gate already: its units are still on their way, it did not idle.
  const bool busy = !f.queue.empty() || f.in_flight > 0;
  const double start_tag = busy ? f.last_finish : std::max(virtual_time_, f.last_finish);
  f.last_finish = start_tag + static_cast<double>(bytes) / f.weight;
  f.queue.push_back(Unit{start_tag, bytes, std::move(start)});
  Pump();
}

void FairSendQueue::Done(FlowId flow, std::size_t bytes) {
  auto it = flows_.find(flow);
  if (it == flows_.end()) return;
  it->second.in_flight -= std::min(it->second.in_flight, bytes);
  in_flight_bytes_ -= std::min(in_flight_bytes_, bytes);
  Pump();
}

std::size_t FairSendQueue::ActiveFlows() const {
  std::size_t n = 0;
  for (const auto& [id, f] : flows_) n += (!f.queue.empty() || f.in_flight > 0) ? 1 : 0;
  return n;
}

void FairSendQueue::Pump() {
  if (pumping_) return;  // a unit's start completed synchronously: the outer loop goes on
  pumping_ = true;
  for (;;) {
    Flow* next = nullptr;
    for (auto& [id, f] : flows_) {
      if (!f.queue.empty() && (next == nullptr || f.queue.front().start_tag <
                                                      next->queue.front().start_tag)) {
        next = &f;
      }
    }
    if (next == nullptr) break;
    const bool shared = ActiveFlows() > 1;
    if (shared && in_flight_bytes_ > 0 && in_flight_bytes_ + next->queue.front().bytes >
                                              window_bytes_) {
      break;
    }
    Unit unit = std::move(next->queue.front());
    next->queue.pop_front();
    virtual_time_ = std::max(virtual_time_, unit.start_tag);
    next->in_flight += unit.bytes;
    next->started += unit.bytes;
    in_flight_bytes_ += unit.bytes;
    unit.start();  // may call Done (a send failed at once) or RemoveFlow: `next` is not reused
  }
  pumping_ = false;
}

}  // namespace phub::server
