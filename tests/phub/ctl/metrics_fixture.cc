#include "tests/phub/ctl/metrics_fixture.h"

#include <map>

#include "phub/ctl/metrics_text.h"

namespace phub::ctl::fixture {
namespace {

class BodyWriter {
 public:
  void Family(const std::string& name, const std::string& type, const std::string& help) {
    out_ += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
  }
  void Series(const std::string& name, double value,
              std::map<std::string, std::string> labels = {}) {
    Sample s;
    s.name = name;
    s.labels = std::move(labels);
    s.value = value;
    out_ += FormatSample(s) + "\n";
  }
  template <std::size_t N>
  void Histogram(const std::string& name, const std::array<double, N>& bounds,
                 const std::array<double, N + 1>& counts, const std::string& core) {
    double cumulative = 0;
    for (std::size_t i = 0; i <= N; ++i) {
      cumulative += counts[i];
      Sample s;
      s.name = name + "_bucket";
      s.labels = {{"core", core}};
      if (i < N) {
        // The bound as the format writes numbers ("1e-05", "0.001").
        const std::string line =
            FormatSample({.name = "x", .labels = {}, .value = bounds[i], .timestamp_ms = {}});
        s.labels["le"] = line.substr(2);
      } else {
        s.labels["le"] = "+Inf";
      }
      s.value = cumulative;
      out_ += FormatSample(s) + "\n";
    }
    Series(name + "_sum", 0, {{"core", core}});
    Series(name + "_count", cumulative, {{"core", core}});
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string MetricsBody(const PhubdState& st) {
  BodyWriter w;
  const auto per_core = [&](const std::string& name, const std::string& type,
                            double CoreCounters::*field) {
    w.Family(name, type, "Per core.");
    for (std::size_t c = 0; c < st.cores.size(); ++c) {
      w.Series(name, st.cores[c].*field, {{"core", std::to_string(c)}});
    }
  };
  per_core("phub_core_received_bytes_total", "counter", &CoreCounters::received);
  per_core("phub_core_sent_bytes_total", "counter", &CoreCounters::sent);
  per_core("phub_core_pushes_total", "counter", &CoreCounters::pushes);
  per_core("phub_core_aggregations_total", "counter", &CoreCounters::aggregations);
  per_core("phub_core_chunks", "gauge", &CoreCounters::chunks);
  w.Family("phub_core_aggregation_seconds", "histogram", "One chunk's fused sum + optimizer pass.");
  for (std::size_t c = 0; c < st.cores.size(); ++c) {
    w.Histogram("phub_core_aggregation_seconds", kAggregationBounds, st.cores[c].aggregation_counts,
                std::to_string(c));
  }
  w.Family("phub_core_round_seconds", "histogram", "One iteration of the job on this core.");
  for (std::size_t c = 0; c < st.cores.size(); ++c) {
    w.Histogram("phub_core_round_seconds", kRoundBounds, st.cores[c].round_counts,
                std::to_string(c));
  }
  const auto one = [&](const std::string& name, const std::string& type, double value) {
    w.Family(name, type, "The job, the process.");
    w.Series(name, value);
  };
  const auto per_job = [&](const std::string& name, double FakeJob::*field) {
    w.Family(name, "gauge", "Per job.");
    for (const FakeJob& job : st.jobs) w.Series(name, job.*field, {{"job_name", job.name}});
  };
  per_job("phub_job_running", &FakeJob::running);
  per_job("phub_job_stalled", &FakeJob::stalled);
  per_job("phub_job_world_size", &FakeJob::world_size);
  per_job("phub_job_model_bytes", &FakeJob::model_bytes);
  per_job("phub_job_memory_charge_bytes", &FakeJob::charge);
  per_job("phub_job_weight", &FakeJob::weight);
  per_job("phub_workers_connected", &FakeJob::connected);
  per_job("phub_workers_missing", &FakeJob::missing);
  per_job("phub_job_members", &FakeJob::members);
  per_job("phub_job_iteration", &FakeJob::iteration);
  per_job("phub_job_iterations_per_second", &FakeJob::iterations_per_second);
  per_job("phub_job_rejoin_deadline_seconds", &FakeJob::rejoin_deadline);
  w.Family("phub_job_received_bytes_total", "counter", "Per job.");
  for (const FakeJob& job : st.jobs) {
    w.Series("phub_job_received_bytes_total", job.received_bytes, {{"job_name", job.name}});
  }
  w.Family("phub_job_sent_bytes_total", "counter", "Per job.");
  for (const FakeJob& job : st.jobs) {
    w.Series("phub_job_sent_bytes_total", job.sent_bytes, {{"job_name", job.name}});
  }
  w.Family("phub_job_state", "gauge", "Per job and state.");
  for (const FakeJob& job : st.jobs) {
    if (job.state.empty()) continue;
    for (const char* state : {"forming", "running", "waiting_for_rejoin", "stalled"}) {
      w.Series("phub_job_state", job.state == state ? 1 : 0,
               {{"job_name", job.name}, {"state", state}});
    }
  }
  one("phub_jobs", "gauge", static_cast<double>(st.jobs.size()));
  one("phub_memory_budget_bytes", "gauge", st.memory_budget);
  one("phub_memory_charged_bytes", "gauge", st.memory_charged);
  one("phub_jobs_formed_total", "counter", st.jobs_formed);
  one("phub_jobs_stalled_total", "counter", st.jobs_stalled);
  one("phub_jobs_ended_total", "counter", st.jobs_ended);
  one("phub_jobs_refused_for_memory_total", "counter", st.refused_for_memory);
  one("phub_workers_lost_total", "counter", st.workers_lost);
  one("phub_workers_rejoined_total", "counter", st.workers_rejoined);
  one("phub_checkpoints_written_total", "counter", st.checkpoints);
  one("phub_checkpoint_failures_total", "counter", st.checkpoint_failures);
  one("phub_hellos_refused_total", "counter", st.hellos_refused);
  one("process_resident_memory_bytes", "gauge", st.resident_bytes);
  one("process_virtual_memory_bytes", "gauge", st.virtual_bytes);
  one("process_cpu_seconds_total", "counter", st.cpu_seconds);
  one("process_start_time_seconds", "gauge", st.start_time);
  one("process_open_fds", "gauge", st.open_fds);
  one("process_max_fds", "gauge", st.max_fds);
  w.Family("phub_build_info", "gauge", "The phub version and wire protocol; always 1.");
  w.Series("phub_build_info", 1, {{"version", st.version}, {"protocol", st.protocol}});
  return w.Take();
}

}  // namespace phub::ctl::fixture
