// The control plane's exported series: callbacks over the state it owns, read when the metrics
// endpoint renders, on this same thread (so no field here needs to be atomic). A job's series
// carry its name (job_name="NAME": Prometheus keeps `job` for its own scrape jobs) and exist
// while it forms or runs.
#include "phub/server/control_plane.h"
#include "phub/server/admission/job_tokens.h"

#include <chrono>
#include <string_view>

namespace phub::server {

void ControlPlane::AddMetrics(metrics::Registry& registry) {
  const auto job_samples = [this](std::function<double(Job&)> read) {
    return [this, read = std::move(read)] {
      metrics::Registry::Samples samples;
      for (const auto& [job_name, job] : jobs_) {
        if (!job->ended()) samples.push_back({{{"job_name", job_name}}, read(*job)});
      }
      return samples;
    };
  };
  const auto per_job = [&](const char* name, const char* help, std::function<double(Job&)> read) {
    registry.AddCallbackGaugeFamily(name, help, job_samples(std::move(read)));
  };
  const auto per_job_counter = [&](const char* name, const char* help,
                                   std::function<double(Job&)> read) {
    registry.AddCallbackCounterFamily(name, help, job_samples(std::move(read)));
  };
  const auto gauge = [&](const char* name, const char* help, std::function<double()> read) {
    registry.AddCallbackGauge(name, help, {}, std::move(read));
  };
  const auto counter = [&](const char* name, const char* help, const std::uint64_t& value) {
    registry.AddCallbackCounter(name, help, {},
                                [&value] { return static_cast<double>(value); });
  };
  per_job("phub_job_running", "1 while the job runs (formed, not ended); 0 while it forms.",
          [](const Job& job) { return job.running() ? 1.0 : 0.0; });
  per_job("phub_job_stalled", "1 while the job is stalled (it cannot go on and is ending).",
          [](const Job& job) { return job.running() && job.stalled() ? 1.0 : 0.0; });
  per_job("phub_job_world_size", "Workers of the job (an elastic job: the most it may have).",
          [](const Job& job) { return static_cast<double>(job.world_size()); });
  per_job("phub_job_model_bytes", "Bytes of the running job's model, float32 (0 while forming).",
          [](const Job& job) { return static_cast<double>(job.model_bytes()); });
  per_job("phub_job_memory_charge_bytes",
          "What the job is charged against --memory-budget-bytes (model x (world size + 3)).",
          [](const Job& job) { return static_cast<double>(job.charge_bytes()); });
  per_job("phub_job_weight", "The job's share of every core's sends (--job-weight; 1 default).",
          [](const Job& job) { return job.weight(); });
  per_job("phub_workers_connected", "Members of the job whose control connection is open.",
          [](const Job& job) { return static_cast<double>(job.connected()); });
  per_job("phub_workers_missing", "Members lost mid-job that the job waits for to rejoin.",
          [](const Job& job) { return static_cast<double>(job.missing()); });
  // Progress and traffic (issue 38): the cores count into each job's own slots (job_traffic.h),
  // read here at the scrape.
  per_job("phub_job_iteration",
          "The iteration every chunk of the job has completed (a resumed job starts at its "
          "checkpoint's).",
          [](Job& job) { return static_cast<double>(job.progress().Iteration()); });
  per_job("phub_job_iterations_per_second",
          "The job's iterations per second over the recent past (since the oldest scrape 1 to "
          "30 s ago, else since its start).",
          [](Job& job) {
            return job.progress().IterationsPerSecond(std::chrono::steady_clock::now());
          });
  per_job_counter("phub_job_received_bytes_total",
                  "Payload bytes in for the job (pushes and initial weights), all cores.",
                  [](Job& job) { return static_cast<double>(job.progress().ReceivedBytes()); });
  per_job_counter("phub_job_sent_bytes_total",
                  "Payload bytes of weights out for the job, all cores.",
                  [](Job& job) { return static_cast<double>(job.progress().SentBytes()); });
  per_job("phub_job_members", "Ranks held by a worker (joined, not lost).",
          [](Job& job) { return static_cast<double>(job.members()); });
  per_job("phub_job_rejoin_deadline_seconds",
          "While the job waits for lost workers to rejoin: when it stops waiting and stalls "
          "(Unix time, seconds); 0 when it waits for nobody.",
          [](Job& job) {
            const auto deadline = job.rejoin_deadline();
            if (!deadline) return 0.0;
            const auto left = *deadline - std::chrono::steady_clock::now();
            return std::chrono::duration<double>(
                       (std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(left))
                           .time_since_epoch())
                .count();
          });
  registry.AddCallbackGaugeFamily(
      "phub_job_state",
      "1 for the job's state, 0 for the others: forming, running, waiting_for_rejoin (a worker "
      "lost, the job waits --rejoin-timeout-ms for it), stalled.",
      [this] {
        metrics::Registry::Samples samples;
        for (const auto& [job_name, job] : jobs_) {
          if (job->ended()) continue;
          const char* state = !job->running()          ? "forming"
                              : job->stalled()         ? "stalled"
                              : job->rejoin_deadline() ? "waiting_for_rejoin"
                                                       : "running";
          for (const char* s : {"forming", "running", "waiting_for_rejoin", "stalled"}) {
            samples.push_back(
                {{{"job_name", job_name}, {"state", s}}, std::string_view(state) == s ? 1.0 : 0.0});
          }
        }
        return samples;
      });
  gauge("phub_jobs", "Jobs forming or running.", [this] {
    double n = 0;
    for (const auto& [name, job] : jobs_) n += job->ended() ? 0 : 1;
    return n;
  });
  gauge("phub_memory_budget_bytes", "phubd's memory budget for all jobs (--memory-budget-bytes).",
        [this] { return static_cast<double>(options_.admission.sharing.memory_budget_bytes); });
  gauge("phub_memory_charged_bytes", "The budget held by jobs forming or running.",
        [this] { return static_cast<double>(charged_bytes_); });
  counter("phub_jobs_formed_total", "Jobs formed: every worker joined, the job started.",
          counters_.formed);
  counter("phub_jobs_stalled_total", "Jobs that stalled (a worker lost for good, a timeout).",
          counters_.stalls);
  counter("phub_jobs_ended_total", "Jobs ended, stalled or not.", counters_.ended);
  counter("phub_jobs_refused_for_memory_total",
          "Jobs refused because they would pass the memory budget (RESOURCE_EXHAUSTED).",
          jobs_refused_for_memory_);
  counter("phub_workers_lost_total", "Workers lost mid-job (connection closed or silent).",
          counters_.losses);
  counter("phub_workers_rejoined_total", "Lost workers that rejoined their running job.",
          counters_.rejoins);
  counter("phub_checkpoints_written_total", "Checkpoints written to --checkpoint-dir.",
          counters_.checkpoints_written);
  counter("phub_checkpoint_failures_total",
          "Checkpoints not written: a write that failed (periodic or on SIGTERM; the log names "
          "the folder and the error), or a job's folder that could not be created at its start.",
          counters_.checkpoint_failures);
  counter("phub_hellos_refused_total",
          "Control connections refused before joining a job: a Hello refused (token, version, "
          "limits, job full), another message first, or no Hello in time.",
          hellos_refused_);
  gauge("phub_control_connections", "Open control connections.",
        [this] { return static_cast<double>(sessions_.size()); });
  AddAdmissionMetrics(registry);
}

void ControlPlane::AddAdmissionMetrics(metrics::Registry& registry) {
  registry.AddCallbackGauge(
      "phub_authentication",
      "1, labelled with how workers are authenticated: job_tokens (--job-tokens), token "
      "(--token-file), loopback_only (no token: this machine's workers only) or none (no token, "
      "--allow-remote-without-token).",
      {{"mode", AuthenticationMode(options_.admission.sharing).label}}, [] { return 1.0; });
  const auto counter = [&](const char* name, const char* help, const std::uint64_t& value) {
    registry.AddCallbackCounter(name, help, {},
                                [&value] { return static_cast<double>(value); });
  };
  counter("phub_control_connections_refused_per_source_total",
          "Control connections closed at accept: their address already held "
          "--max-pending-per-source connections without an accepted Hello.",
          refused_pending_);
  counter("phub_control_connections_evicted_total",
          "Control connections without an accepted Hello closed for a newer one "
          "(--max-pending-connections).",
          evicted_pending_);
  counter("phub_control_connections_refused_remote_total",
          "Control connections from other machines refused because phubd has no token.",
          refused_remote_);
  registry.AddCallbackGauge("phub_control_connections_pending",
                            "Control connections without an accepted Hello.", {},
                            [this] { return static_cast<double>(pending_.size()); });
}

}  // namespace phub::server
