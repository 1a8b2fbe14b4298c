#include "phub/server/shard/fair_send_queue.h"

#include <algorithm>
#include <cmath>

namespace phub::server {

FairSendQueue::FairSendQueue(Pacing pacing, std::function<void(std::chrono::nanoseconds)> wake,
                             std::function<Clock::time_point()> now)
    : pacing_(pacing), wake_(std::move(wake)), now_(std::move(now)) {
  if (!now_) now_ = [] { return Clock::now(); };
  refilled_ = now_();
  tokens_ = pacing_.bytes_per_s * std::chrono::duration<double>(pacing_.burst).count();
}

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
  Pump();  // the others may now be alone
}

std::size_t FairSendQueue::queued(FlowId flow) const {
  auto it = flows_.find(flow);
  return it == flows_.end() ? 0 : it->second.queue.size();
}

std::uint64_t FairSendQueue::started_bytes(FlowId flow) const {
  auto it = flows_.find(flow);
  return it == flows_.end() ? 0 : it->second.started;
}

bool FairSendQueue::Submit(FlowId flow, std::size_t bytes, std::function<void()> start) {
  auto it = flows_.find(flow);
  if (it == flows_.end()) return false;  // its job is gone
  Flow& f = it->second;
  // An idle flow starts at the current virtual time: no credit for the idle spell. A busy one
  // goes on from its last finish, even when all it had has started already: its units are
  // still on their way, it did not idle.
  const bool busy = !f.queue.empty() || f.in_flight > 0;
  const double start_tag = busy ? f.last_finish : std::max(virtual_time_, f.last_finish);
  f.last_finish = start_tag + static_cast<double>(bytes) / f.weight;
  f.queue.push_back(Unit{start_tag, bytes, std::move(start)});
  Pump();
  return true;
}

void FairSendQueue::Done(FlowId flow, std::size_t bytes) {
  auto it = flows_.find(flow);
  if (it == flows_.end()) return;
  it->second.in_flight -= std::min(it->second.in_flight, bytes);
  it->second.progressed = now_();
  in_flight_bytes_ -= std::min(in_flight_bytes_, bytes);
  Pump();
}

void FairSendQueue::Wake() {
  wake_pending_ = false;
  Pump();
}

std::size_t FairSendQueue::ActiveFlows(Clock::time_point now) const {
  std::size_t n = 0;
  for (const auto& [id, f] : flows_) {
    // Stalled: nothing completed for `stalled_after`, or for 4x what its bytes in flight take
    // at the paced rate, if longer (a unit is a chunk to every worker: 16 MiB at 1.25 Gbit/s
    // is 107 ms, and a healthy flow completes one about that often).
    auto patience = pacing_.stalled_after;
    if (pacing_.bytes_per_s > 0) {
      patience = std::max(patience, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                        std::chrono::duration<double>(
                                            4.0 * static_cast<double>(f.in_flight) /
                                            pacing_.bytes_per_s)));
    }
    const bool sending = f.in_flight > 0 && now - f.progressed < patience;
    n += (!f.queue.empty() || sending) ? 1 : 0;
  }
  return n;
}

void FairSendQueue::Refill(Clock::time_point now) {
  const double elapsed = std::chrono::duration<double>(now - refilled_).count();
  refilled_ = now;
  const double burst =
      pacing_.bytes_per_s * std::chrono::duration<double>(pacing_.burst).count();
  tokens_ = std::min(burst, tokens_ + elapsed * pacing_.bytes_per_s);
}

void FairSendQueue::Pump() {
  if (pumping_) return;  // a unit's start completed synchronously: the outer loop goes on
  pumping_ = true;
  const bool paced = pacing_.bytes_per_s > 0;
  const Clock::time_point now = now_();
  if (paced) Refill(now);
  for (;;) {
    Flow* next = nullptr;
    for (auto& [id, f] : flows_) {
      if (!f.queue.empty() && (next == nullptr || f.queue.front().start_tag <
                                                      next->queue.front().start_tag)) {
        next = &f;
      }
    }
    if (next == nullptr) break;
    const bool shared = ActiveFlows(now) > 1;
    if (paced && shared && tokens_ <= 0) {
      // Owed: start the next unit when the tokens are back (one timer at a time).
      if (wake_ && !wake_pending_) {
        wake_pending_ = true;
        const double seconds = (1.0 - tokens_) / pacing_.bytes_per_s;
        wake_(std::chrono::nanoseconds(static_cast<std::int64_t>(std::ceil(seconds * 1e9))));
      }
      break;
    }
    Unit unit = std::move(next->queue.front());
    next->queue.pop_front();
    virtual_time_ = std::max(virtual_time_, unit.start_tag);
    if (next->in_flight == 0) next->progressed = now;
    next->in_flight += unit.bytes;
    next->started += unit.bytes;
    in_flight_bytes_ += unit.bytes;
    // Charged only while shared: a job alone owes nothing when a second one arrives.
    if (paced && shared) tokens_ -= static_cast<double>(unit.bytes);
    unit.start();  // may call Done (a send failed at once) or RemoveFlow: `next` is not reused
  }
  pumping_ = false;
}

}  // namespace phub::server
