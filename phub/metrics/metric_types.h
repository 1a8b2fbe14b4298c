// The three kinds of Prometheus metric phubd exports, as plain values a hot path can update
// without a lock: Counter (only goes up), Gauge (set or moved), Histogram (fixed buckets).
//
// Thread-safety: every update and read is a relaxed atomic, so a core thread may update its
// own series while the exporter's thread reads them; readers see each value whole, though a
// histogram's buckets, sum and count may be read between two of one Observe's updates (a scrape
// is a snapshot of moving numbers anyway). Update a series from one thread where you can (each
// server core owns its own): every value has cache lines of its own (alignas), so two cores'
// counters never share one on the data path.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace phub::metrics {

class alignas(64) Counter {
 public:
  void Add(std::uint64_t n = 1) { value_.fetch_add(n, std::memory_order_relaxed); }
  std::uint64_t value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<std::uint64_t> value_{0};
};

class alignas(64) Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double d) { value_.fetch_add(d, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into buckets with fixed upper bounds (Prometheus' `le`), plus their sum
// and count. The bounds are set at construction, sorted ascending; +Inf is implicit.
class alignas(64) Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);

  void Observe(double value);

  std::span<const double> upper_bounds() const { return bounds_; }
  // Per bucket, not cumulative: counts()[i] observations fell in (bounds[i-1], bounds[i]];
  // the last entry is the +Inf bucket.
  std::vector<std::uint64_t> counts() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  std::uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  struct alignas(64) Line {
    std::atomic<std::uint64_t> counts[8];
  };
  std::atomic<std::uint64_t>& bucket(std::size_t i) const { return buckets_[i / 8].counts[i % 8]; }

  std::vector<double> bounds_;
  std::unique_ptr<Line[]> buckets_;  // bounds_.size() + 1 counts, on lines of their own
  std::atomic<double> sum_{0};
  std::atomic<std::uint64_t> count_{0};
};

}  // namespace phub::metrics
