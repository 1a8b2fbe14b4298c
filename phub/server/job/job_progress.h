// A running job's progress for its per-job series and phubctl (docs/operations.md "Metrics"):
// the iteration every chunk has completed and the recent iterations per second. Reads the job's
// traffic counters (job_traffic.h), which the cores add to; everything else here is the
// control plane's, used on its thread only (the metrics endpoint renders there).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <utility>

#include "phub/server/shard/job_traffic.h"

namespace phub::server {

class JobProgress {
 public:
  using Clock = std::chrono::steady_clock;
  // The rate is over the span since the oldest sample at least kMinSpan old, samples being
  // taken when read (a scrape), at most one per kMinSpan, kept for kWindow.
  static constexpr std::chrono::seconds kMinSpan{1};
  static constexpr std::chrono::seconds kWindow{30};

  // The job started: `chunks` chunks at `start_iteration` (a resumed checkpoint's, else 0).
  void Start(std::shared_ptr<const JobTraffic> traffic, std::uint64_t chunks,
             std::uint64_t start_iteration, Clock::time_point now) {
    traffic_ = std::move(traffic);
    chunks_ = chunks;
    start_ = {now, start_iteration};
    samples_.clear();
  }

  // The iteration every chunk has completed (0 before the start). Chunks run at most one
  // iteration apart (a worker pushes t+1 once it has all weights of t), so the aggregations
  // over the chunks' count, rounded down, are the least chunk's iterations.
  std::uint64_t Iteration() const {
    if (!traffic_ || chunks_ == 0) return start_.second;
    return start_.second + traffic_->aggregations() / chunks_;
  }
  std::uint64_t ReceivedBytes() const { return traffic_ ? traffic_->received_bytes() : 0; }
  std::uint64_t SentBytes() const { return traffic_ ? traffic_->sent_bytes() : 0; }

  // Iterations per second over the recent past: since the oldest sample at least kMinSpan old
  // and at most about kWindow, else since the job's start. Takes a sample.
  double IterationsPerSecond(Clock::time_point now) {
    if (!traffic_) return 0;
    const std::uint64_t iteration = Iteration();
    while (samples_.size() >= 2 && now - samples_[1].first > kWindow) samples_.pop_front();
    std::pair<Clock::time_point, std::uint64_t> base = start_;
    if (!samples_.empty() && now - samples_.front().first >= kMinSpan) base = samples_.front();
    if (samples_.empty() || now - samples_.back().first >= kMinSpan) {
      samples_.emplace_back(now, iteration);
    }
    const double seconds = std::chrono::duration<double>(now - base.first).count();
    if (seconds <= 0 || iteration < base.second) return 0;
    return static_cast<double>(iteration - base.second) / seconds;
  }

 private:
  std::shared_ptr<const JobTraffic> traffic_;
  std::uint64_t chunks_ = 0;
  std::pair<Clock::time_point, std::uint64_t> start_{};
  std::deque<std::pair<Clock::time_point, std::uint64_t>> samples_;
};

}  // namespace phub::server
