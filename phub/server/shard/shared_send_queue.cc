#include "phub/server/shard/shared_send_queue.h"

#include <utility>

namespace phub::server {

SharedSendQueue::SharedSendQueue(FairPacing pacing,
                                 std::function<void(std::chrono::nanoseconds)> wake,
                                 std::function<FairSendQueue::Clock::time_point()> now)
    : queue_(pacing, std::move(wake), std::move(now)) {}

void SharedSendQueue::AddFlow(FlowId flow, double weight, FlowHome home) {
  std::lock_guard lock(mu_);
  homes_[flow] = std::move(home);
  queue_.AddFlow(flow, weight);
}

void SharedSendQueue::RemoveFlow(FlowId flow) {
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mu_);
    homes_.erase(flow);
    queue_.RemoveFlow(flow);  // the others may now be alone: their units may start
    ready.swap(ready_);
  }
  StartReady(std::move(ready));
}

bool SharedSendQueue::Submit(FlowId flow, std::size_t bytes, std::function<void()> start) {
  std::vector<Ready> ready;
  bool queued = false;
  {
    std::lock_guard lock(mu_);
    // The queue "starts" a unit by handing it over; it is started below, unlocked.
    queued = queue_.Submit(flow, bytes, [this, flow, start = std::move(start)]() mutable {
      ready_.push_back(Ready{flow, std::move(start)});
    });
    ready.swap(ready_);
  }
  StartReady(std::move(ready));
  return queued;
}

void SharedSendQueue::Done(FlowId flow, std::size_t bytes) {
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mu_);
    queue_.Done(flow, bytes);
    ready.swap(ready_);
  }
  StartReady(std::move(ready));
}

void SharedSendQueue::Wake() {
  std::vector<Ready> ready;
  {
    std::lock_guard lock(mu_);
    queue_.Wake();
    ready.swap(ready_);
  }
  StartReady(std::move(ready));
}

std::uint64_t SharedSendQueue::started_bytes(FlowId flow) const {
  std::lock_guard lock(mu_);
  return queue_.started_bytes(flow);
}

bool SharedSendQueue::Has(FlowId flow) const {
  std::lock_guard lock(mu_);
  return homes_.count(flow) > 0;
}

void SharedSendQueue::StartReady(std::vector<Ready> ready) {
  std::vector<std::function<void()>> here;
  {
    std::lock_guard lock(mu_);
    for (Ready& unit : ready) {
      auto it = homes_.find(unit.flow);
      if (it == homes_.end()) continue;  // its job ended meanwhile
      // On its own thread a flow cannot be removed under us (only that thread removes it).
      if (it->second.here()) {
        here.push_back(std::move(unit.start));
        continue;
      }
      // Posted under the lock: once RemoveFlow has returned nothing more is posted to the
      // flow's thread, which may then end.
      it->second.post([this, flow = unit.flow, start = std::move(unit.start)] {
        if (Has(flow)) start();
      });
    }
  }
  for (std::function<void()>& start : here) start();
}

}  // namespace phub::server
