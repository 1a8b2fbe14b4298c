#include "phub/metrics/metric_types.h"

#include <algorithm>
#include <cassert>

namespace phub::metrics {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)),
      buckets_(new Line[bounds_.size() / 8 + 1]) {
  assert(std::is_sorted(bounds_.begin(), bounds_.end()));
  for (std::size_t i = 0; i <= bounds_.size(); ++i) bucket(i).store(0, std::memory_order_relaxed);
}

void Histogram::Observe(double value) {
  // Buckets are few (~16): a linear scan beats a binary search's branches at this size.
  std::size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  bucket(i).fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(value, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<std::uint64_t> Histogram::counts() const {
  std::vector<std::uint64_t> out(bounds_.size() + 1);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = bucket(i).load(std::memory_order_relaxed);
  return out;
}

}  // namespace phub::metrics
