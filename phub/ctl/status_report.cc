#include "phub/ctl/status_report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>

namespace phub::ctl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The series phubd exports per core (label core); the names are in docs/operations.md.
constexpr const char* kReceived = "phub_core_received_bytes_total";
constexpr const char* kSent = "phub_core_sent_bytes_total";
constexpr const char* kPushes = "phub_core_pushes_total";
constexpr const char* kAggregations = "phub_core_aggregations_total";
constexpr const char* kChunks = "phub_core_chunks";
constexpr const char* kAggregationSeconds = "phub_core_aggregation_seconds";
constexpr const char* kRoundSeconds = "phub_core_round_seconds";

double Or(std::optional<double> v) { return v.value_or(kNaN); }

// Counter increase per second; a counter that went down was reset (Prometheus's rate() rule:
// it counted from 0 since).
double Rate(const Scrape& first, const Scrape& second, const char* name, const Labels& labels,
            double interval_s) {
  const auto a = first.Value(name, labels);
  const auto b = second.Value(name, labels);
  if (!a || !b || !(interval_s > 0)) return kNaN;
  const double delta = *b >= *a ? *b - *a : *b;
  return delta / interval_s;
}

Quantile QuantileOf(double q, const std::vector<Bucket>& earlier,
                    const std::vector<Bucket>& later) {
  if (later.empty()) return {kNaN, false};
  const auto deltas = BucketDeltas(earlier, later);
  if (deltas && ObservationCount(*deltas) > 0) return {BucketQuantile(q, *deltas), false};
  const double since_start = BucketQuantile(q, later);
  return {since_start, !std::isnan(since_start)};  // no quantile at all is not "since start"
}

// Core labels as numbers where they are ("2" before "10"), others after, by text.
bool CoreOrder(const std::string& a, const std::string& b) {
  const auto numeric = [](const std::string& s) {
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  const bool na = numeric(a), nb = numeric(b);
  if (na != nb) return na;
  if (na) {
    const auto strip = [](const std::string& s) {
      const std::size_t i = s.find_first_not_of('0');
      return i == std::string::npos ? std::string_view("0") : std::string_view(s).substr(i);
    };
    const std::string_view sa = strip(a), sb = strip(b);
    if (sa.size() != sb.size()) return sa.size() < sb.size();
    if (sa != sb) return sa < sb;
  }
  return a < b;
}

std::vector<std::string> CoresOf(const Scrape& scrape) {
  std::vector<std::string> cores;
  std::unordered_set<std::string> seen;
  for (const std::string name : {kReceived, kSent, kPushes, kAggregations, kChunks}) {
    for (std::string& core : scrape.LabelValues(name, "core")) {
      if (seen.insert(core).second) cores.push_back(std::move(core));
    }
  }
  for (const std::string name : {kAggregationSeconds, kRoundSeconds}) {
    for (std::string& core : scrape.LabelValues(name + "_bucket", "core")) {
      if (seen.insert(core).second) cores.push_back(std::move(core));
    }
  }
  std::sort(cores.begin(), cores.end(), CoreOrder);
  return cores;
}

// The per-job series (label job_name, and for phub_job_state state) of one job.
JobStatus JobOf(const Scrape& first, const Scrape& s, const std::string& name, double interval_s,
                double now_unix_s) {
  const Labels labels = {{"job_name", name}};
  JobStatus job;
  job.name = name;
  const auto running = s.Value("phub_job_running", labels);
  const auto stalled = s.Value("phub_job_stalled", labels);
  job.world_size = Or(s.Value("phub_job_world_size", labels));
  job.workers_connected = Or(s.Value("phub_workers_connected", labels));
  job.workers_missing = Or(s.Value("phub_workers_missing", labels));
  job.model_bytes = Or(s.Value("phub_job_model_bytes", labels));
  job.memory_charge_bytes = Or(s.Value("phub_job_memory_charge_bytes", labels));
  job.weight = Or(s.Value("phub_job_weight", labels));
  job.members = Or(s.Value("phub_job_members", labels));
  job.iteration = Or(s.Value("phub_job_iteration", labels));
  job.iterations_per_second = Or(s.Value("phub_job_iterations_per_second", labels));
  job.received_bytes_per_s = Rate(first, s, "phub_job_received_bytes_total", labels, interval_s);
  job.sent_bytes_per_s = Rate(first, s, "phub_job_sent_bytes_total", labels, interval_s);
  job.rejoin_deadline_unix_s = Or(s.Value("phub_job_rejoin_deadline_seconds", labels));
  job.rejoin_left_s =
      job.rejoin_deadline_unix_s > 0 ? job.rejoin_deadline_unix_s - now_unix_s : kNaN;
  for (const char* state : {"forming", "running", "waiting_for_rejoin", "stalled"}) {
    if (s.Value("phub_job_state", {{"job_name", name}, {"state", state}}).value_or(0) > 0) {
      job.state = state;
      return job;
    }
  }
  if (!running && !stalled) {
    job.state = "unknown";
  } else if (stalled.value_or(0) > 0) {
    job.state = "stalled";
  } else if (running.value_or(0) > 0) {
    job.state = "running";
  } else {
    job.state = "forming";  // phubd exports a job's series only while it forms or runs
  }
  return job;
}

// Every job with a phub_job_world_size{job=...} series, by name.
std::vector<JobStatus> JobsOf(const Scrape& first, const Scrape& s, double interval_s,
                              double now_unix_s) {
  std::vector<std::string> names = s.LabelValues("phub_job_world_size", "job_name");
  std::sort(names.begin(), names.end());
  std::vector<JobStatus> jobs;
  jobs.reserve(names.size());
  for (const std::string& name : names) {
    jobs.push_back(JobOf(first, s, name, interval_s, now_unix_s));
  }
  return jobs;
}

LifetimeCounters LifetimeOf(const Scrape& s) {
  LifetimeCounters c;
  c.jobs_formed = Or(s.Value("phub_jobs_formed_total"));
  c.jobs_stalled = Or(s.Value("phub_jobs_stalled_total"));
  c.jobs_ended = Or(s.Value("phub_jobs_ended_total"));
  c.workers_lost = Or(s.Value("phub_workers_lost_total"));
  c.workers_rejoined = Or(s.Value("phub_workers_rejoined_total"));
  c.checkpoints_written = Or(s.Value("phub_checkpoints_written_total"));
  c.checkpoint_failures = Or(s.Value("phub_checkpoint_failures_total"));
  c.hellos_refused = Or(s.Value("phub_hellos_refused_total"));
  c.jobs_refused_for_memory = Or(s.Value("phub_jobs_refused_for_memory_total"));
  return c;
}

// The histogram of all cores together, bucket by bucket; empty if the cores' bounds differ.
class BucketSum {
 public:
  void Add(const std::vector<Bucket>& buckets) { ok_ = ok_ && AddBuckets(sum_, buckets); }
  std::vector<Bucket> Get() const { return ok_ ? sum_ : std::vector<Bucket>(); }

 private:
  std::vector<Bucket> sum_;
  bool ok_ = true;
};

}  // namespace

StatusOr<StatusReport> BuildStatusReport(const Scrape& first, const Scrape& second,
                                         double interval_s, double now_unix_s) {
  const Sample* build = second.FindAny("phub_build_info");
  if (build == nullptr) {
    return absl::NotFoundError("the response has no phub_build_info series (" +
                               std::to_string(second.size()) +
                               " series in all): it does not look like phubd's /metrics");
  }
  const auto start1 = first.Value("process_start_time_seconds");
  const auto start2 = second.Value("process_start_time_seconds");
  // Half a second of slack: a start time computed from /proc's clock ticks may be rounded
  // differently from one scrape to the next.
  if (start1 && start2 && std::fabs(*start1 - *start2) > 0.5) {
    return absl::FailedPreconditionError(
        "phubd restarted between the two scrapes (process_start_time_seconds went from " +
        std::to_string(*start1) + " to " + std::to_string(*start2) +
        "): the rates would mean nothing; run phubctl status again");
  }

  StatusReport r;
  r.interval_s = interval_s;
  r.jobs = JobsOf(first, second, interval_s, now_unix_s);
  // An unlabelled phub_job_world_size (a phubd of one unnamed job) does not count: its jobs
  // would read as "none".
  r.jobs_known = second.Value("phub_jobs").has_value() || !r.jobs.empty();
  r.memory_budget_bytes = Or(second.Value("phub_memory_budget_bytes"));
  r.memory_charged_bytes = Or(second.Value("phub_memory_charged_bytes"));
  r.lifetime = LifetimeOf(second);

  ProcessStatus& p = r.process;
  const auto label = [build](const char* name) {
    const auto it = build->labels.find(name);
    return it == build->labels.end() ? std::string() : it->second;
  };
  p.version = label("version");
  p.protocol = label("protocol");
  p.uptime_s = start2 ? now_unix_s - *start2 : kNaN;
  p.resident_bytes = Or(second.Value("process_resident_memory_bytes"));
  p.virtual_bytes = Or(second.Value("process_virtual_memory_bytes"));
  p.cpu_cores = Rate(first, second, "process_cpu_seconds_total", {}, interval_s);
  p.open_fds = Or(second.Value("process_open_fds"));
  p.max_fds = Or(second.Value("process_max_fds"));

  r.total.core = "total";
  // Totals add NaN like any number: a total with an unknown part is unknown. A core whose
  // earlier buckets do not add up leaves the total's deltas failing, and the total quantiles
  // fall back to since-start, marked.
  BucketSum aggregation_first, aggregation_second, round_first, round_second;
  for (const std::string& core : CoresOf(second)) {
    const Labels labels = {{"core", core}};
    CoreStatus c;
    c.core = core;
    c.chunks = Or(second.Value(kChunks, labels));
    c.received_bytes_per_s = Rate(first, second, kReceived, labels, interval_s);
    c.sent_bytes_per_s = Rate(first, second, kSent, labels, interval_s);
    c.pushes_per_s = Rate(first, second, kPushes, labels, interval_s);
    c.aggregations_per_s = Rate(first, second, kAggregations, labels, interval_s);
    const auto agg1 = first.Buckets(kAggregationSeconds, labels);
    const auto agg2 = second.Buckets(kAggregationSeconds, labels);
    const auto round1 = first.Buckets(kRoundSeconds, labels);
    const auto round2 = second.Buckets(kRoundSeconds, labels);
    c.aggregation_p50 = QuantileOf(0.5, agg1, agg2);
    c.aggregation_p99 = QuantileOf(0.99, agg1, agg2);
    c.round_p50 = QuantileOf(0.5, round1, round2);

    r.total.chunks += c.chunks;
    r.total.received_bytes_per_s += c.received_bytes_per_s;
    r.total.sent_bytes_per_s += c.sent_bytes_per_s;
    r.total.pushes_per_s += c.pushes_per_s;
    r.total.aggregations_per_s += c.aggregations_per_s;
    aggregation_first.Add(agg1);
    aggregation_second.Add(agg2);
    round_first.Add(round1);
    round_second.Add(round2);
    r.cores.push_back(std::move(c));
  }
  r.total.aggregation_p50 = QuantileOf(0.5, aggregation_first.Get(), aggregation_second.Get());
  r.total.aggregation_p99 = QuantileOf(0.99, aggregation_first.Get(), aggregation_second.Get());
  r.total.round_p50 = QuantileOf(0.5, round_first.Get(), round_second.Get());
  if (r.cores.empty()) {
    r.total.chunks = r.total.received_bytes_per_s = r.total.sent_bytes_per_s = kNaN;
    r.total.pushes_per_s = r.total.aggregations_per_s = kNaN;
  }
  return r;
}

}  // namespace phub::ctl
