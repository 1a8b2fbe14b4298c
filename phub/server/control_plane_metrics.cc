// The control plane's exported series: callbacks over the state it owns, read when the metrics
// endpoint renders, on this same thread (so no field here needs to be atomic).
#include "phub/server/control_plane.h"

namespace phub::server {

void ControlPlane::AddMetrics(metrics::Registry& registry) {
  const auto gauge = [&](const char* name, const char* help, std::function<double()> read) {
    registry.AddCallbackGauge(name, help, {}, std::move(read));
  };
  const auto counter = [&](const char* name, const char* help, const std::uint64_t& value) {
    registry.AddCallbackCounter(name, help, {},
                                [&value] { return static_cast<double>(value); });
  };
  gauge("phub_job_running", "1 while a job runs (formed, not ended), else 0.",
        [this] { return running_ ? 1.0 : 0.0; });
  gauge("phub_job_stalled", "1 while the running job is stalled (it cannot go on and is ending).",
        [this] { return running_ && stalled_ ? 1.0 : 0.0; });
  gauge("phub_job_world_size", "Workers of the running job (0 when none runs).",
        [this] { return running_ ? static_cast<double>(options_.world_size) : 0.0; });
  gauge("phub_job_model_bytes", "Bytes of the running job's model, float32 (0 when none runs).",
        [this] {
          if (!running_ || !spec_) return 0.0;
          double bytes = 0;
          for (const keys::Chunk& chunk : spec_->table.chunks()) bytes += chunk.bytes();
          return bytes;
        });
  gauge("phub_workers_connected",
        "Members of the forming or running job whose control connection is open.", [this] {
          double n = 0;
          for (const SessionPtr& member : members_) n += member ? 1 : 0;
          return n;
        });
  gauge("phub_workers_missing", "Members lost mid-job that the job waits for to rejoin.",
        [this] { return static_cast<double>(missing_count_); });
  counter("phub_jobs_formed_total", "Jobs formed: every worker joined, the job started.",
          jobs_started_);
  counter("phub_jobs_stalled_total", "Jobs that stalled (a worker lost for good, a timeout).",
          stalls_);
  counter("phub_jobs_ended_total", "Jobs ended, stalled or not.", jobs_ended_);
  counter("phub_workers_lost_total", "Workers lost mid-job (connection closed or silent).",
          losses_);
  counter("phub_workers_rejoined_total", "Lost workers that rejoined their running job.",
          rejoins_);
  counter("phub_checkpoints_written_total", "Checkpoints written to --checkpoint-dir.",
          checkpoints_written_);
  counter("phub_hellos_refused_total",
          "Control connections refused before joining a job: a Hello refused (token, version, "
          "limits, job full), another message first, or no Hello in time.",
          hellos_refused_);
  gauge("phub_control_connections", "Open control connections.",
        [this] { return static_cast<double>(sessions_.size()); });
}

}  // namespace phub::server
