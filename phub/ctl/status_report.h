// What `phubctl status` shows, computed from two scrapes of phubd's /metrics taken
// `interval_s` apart (metric names: docs/operations.md "Metrics"): the jobs (one row each, from
// the series labelled job="NAME") and the memory budget they share, the lifetime counters, the
// process, and per core the rates between the scrapes and latency quantiles.
//
// Every number is a double; NaN means "not known" (the series is missing from the scrape, or a
// rate with no earlier value): renderers print "-" (text) or null (JSON). The scrapes are a
// peer's text, so any value may be absurd (negative, huge, NaN): nothing here assumes otherwise.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/ctl/scrape.h"

namespace phub::ctl {

// A latency quantile in seconds. The bucket deltas between the scrapes give it; when nothing
// was observed in between, the cumulative buckets (everything since phubd started) do, and
// `since_start` says so.
struct Quantile {
  double seconds = 0;
  bool since_start = false;
};

struct CoreStatus {
  std::string core;  // the core label ("0", "1", ...); "total" for the total row
  double chunks = 0;
  double received_bytes_per_s = 0;
  double sent_bytes_per_s = 0;
  double pushes_per_s = 0;
  double aggregations_per_s = 0;
  Quantile aggregation_p50;
  Quantile aggregation_p99;
  Quantile round_p50;
};

// One job forming or running (phubd exports no series for a job that ended).
struct JobStatus {
  std::string name;   // the job label
  // forming, running, waiting_for_rejoin, stalled (phub_job_state; from phub_job_running and
  // phub_job_stalled for a phubd without it), or unknown (none of them).
  std::string state;
  double world_size = 0;
  double workers_connected = 0;
  double workers_missing = 0;
  double model_bytes = 0;
  double memory_charge_bytes = 0;  // what the job holds of the memory budget
  double weight = 0;               // its share of every core's sends
  double members = 0;              // ranks held by a worker
  double iteration = 0;            // completed by every chunk
  double iterations_per_second = 0;  // phubd's recent rate (phub_job_iterations_per_second)
  double received_bytes_per_s = 0;   // the job's payload rates over the interval
  double sent_bytes_per_s = 0;
  // While it waits for a lost worker: Unix seconds when it stops waiting, and seconds left by
  // this machine's clock; 0 and NaN when it waits for nobody.
  double rejoin_deadline_unix_s = 0;
  double rejoin_left_s = 0;
};

// Since phubd started (the second scrape's values).
struct LifetimeCounters {
  double jobs_formed = 0;
  double jobs_stalled = 0;
  double jobs_ended = 0;
  double workers_lost = 0;
  double workers_rejoined = 0;
  double checkpoints_written = 0;
  double checkpoint_failures = 0;
  double hellos_refused = 0;
  double jobs_refused_for_memory = 0;
};

struct ProcessStatus {
  std::string version;  // phub_build_info's labels
  std::string protocol;
  double uptime_s = 0;  // the caller's clock minus process_start_time_seconds
  double resident_bytes = 0;
  double virtual_bytes = 0;
  double cpu_cores = 0;  // CPU seconds per second between the scrapes (1.0 = one core busy)
  double open_fds = 0;
  double max_fds = 0;
};

struct StatusReport {
  double interval_s = 0;
  // False when the endpoint exports neither phub_jobs nor any phub_job_world_size{job=...}
  // series (a phubd before jobs were named, or not phubd): `jobs` is then empty and means
  // nothing, rather than "no jobs".
  bool jobs_known = false;
  std::vector<JobStatus> jobs;      // by name
  double memory_budget_bytes = 0;   // phub_memory_budget_bytes
  double memory_charged_bytes = 0;  // phub_memory_charged_bytes: all jobs' charges
  LifetimeCounters lifetime;
  ProcessStatus process;
  std::vector<CoreStatus> cores;  // by core number
  CoreStatus total;               // rates and chunks summed; quantiles of all cores' buckets
};

// `first` and `second` were scraped `interval_s` apart (seconds, > 0), `now_unix_s` is the wall
// clock at the second. Errors: NotFound if `second` has no phub_build_info (not phubd's
// endpoint); FailedPrecondition if phubd restarted between the scrapes (start times differ).
StatusOr<StatusReport> BuildStatusReport(const Scrape& first, const Scrape& second,
                                         double interval_s, double now_unix_s);

}  // namespace phub::ctl
