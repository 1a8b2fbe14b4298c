// A job's traffic on every core, for its per-job series (docs/operations.md "Metrics"): each
// core's shard of the job adds to its own slot (relaxed atomic adds, the slot on cache lines of
// its own: no lock, no line shared with another core), the control plane reads the sums when
// /metrics is scraped. Created with the job's spec (JobSpec::traffic); shared by the job and its
// shards, so a scrape after a shard is gone still reads valid memory.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace phub::server {

struct alignas(64) JobCoreTraffic {
  std::atomic<std::uint64_t> received_bytes{0};  // pushes and initial weights, payload
  std::atomic<std::uint64_t> sent_bytes{0};      // weights out, payload
  std::atomic<std::uint64_t> aggregations{0};    // chunk-iterations summed on this core
};

class JobTraffic {
 public:
  explicit JobTraffic(std::size_t cores) : cores_(cores) {}
  JobTraffic(const JobTraffic&) = delete;
  JobTraffic& operator=(const JobTraffic&) = delete;

  // REQUIRES: core < the count given at construction. Written by that core's thread only.
  JobCoreTraffic& core(std::size_t core) { return cores_[core]; }

  // Sums over the cores, from any thread (each a relaxed load: a scrape may see one core a
  // chunk ahead of another, never a torn value).
  std::uint64_t received_bytes() const { return Sum(&JobCoreTraffic::received_bytes); }
  std::uint64_t sent_bytes() const { return Sum(&JobCoreTraffic::sent_bytes); }
  std::uint64_t aggregations() const { return Sum(&JobCoreTraffic::aggregations); }

 private:
  std::uint64_t Sum(std::atomic<std::uint64_t> JobCoreTraffic::*field) const {
    std::uint64_t total = 0;
    for (const JobCoreTraffic& c : cores_) total += (c.*field).load(std::memory_order_relaxed);
    return total;
  }
  std::vector<JobCoreTraffic> cores_;  // never resized: the atomics do not move
};

}  // namespace phub::server
