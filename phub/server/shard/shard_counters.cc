// Shard (shard.h): what it counts, into ShardStats (the job-end log line), the core's
// exported series (server_metrics.h; absent in tests and fuzzers) and the job's own
// (job_traffic.h: its slot for this core).
#include <chrono>

#include "phub/server/shard/shard.h"

namespace phub::server {

void Shard::CountReceived(std::uint64_t bytes, bool push) {
  stats_.bytes_in += bytes;
  if (job_->traffic) {
    job_->traffic->core(core_).received_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  if (!metrics_) return;
  metrics_->received_bytes->Add(bytes);
  if (!push) return;
  metrics_->pushes->Add();
  if (!round_began_) round_began_ = std::chrono::steady_clock::now();
}

void Shard::CountSent(std::uint64_t bytes) {
  stats_.bytes_out += bytes;
  if (job_->traffic) {
    job_->traffic->core(core_).sent_bytes.fetch_add(bytes, std::memory_order_relaxed);
  }
  if (metrics_) metrics_->sent_bytes->Add(bytes);
}

void Shard::CountAggregation(std::chrono::steady_clock::time_point began) {
  ++stats_.aggregations;
  if (job_->traffic) {
    job_->traffic->core(core_).aggregations.fetch_add(1, std::memory_order_relaxed);
  }
  if (!metrics_) return;
  const auto now = std::chrono::steady_clock::now();
  metrics_->aggregations->Add();
  metrics_->aggregation_seconds->Observe(std::chrono::duration<double>(now - began).count());
  if (++round_aggregations_ < chunks_.size()) return;
  // As many aggregations as chunks: every chunk moved one iteration (chunks run at most one
  // iteration apart: a worker pushes iteration t+1 after it has all weights of t).
  if (round_began_) {
    metrics_->round_seconds->Observe(std::chrono::duration<double>(now - *round_began_).count());
  }
  round_began_ = now;
  round_aggregations_ = 0;
}

}  // namespace phub::server
