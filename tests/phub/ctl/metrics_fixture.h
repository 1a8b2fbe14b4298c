// phubd's /metrics body as a test chooses it: every series of docs/operations.md "Metrics", from
// a plain struct of numbers, in the layout phubd writes (HELP and TYPE per family, histograms
// as cumulative _bucket series with _sum and _count). The tests of phubctl's report, its HTTP
// client and the binary, and the fuzzer's seeds (tests/fuzz/fuzz_seed_writer.cc), use it.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace phub::ctl::fixture {

// The buckets phubd uses (upper bounds; +Inf is the 16th).
inline constexpr std::array<double, 15> kAggregationBounds = {
    1e-05, 2.5e-05, 5e-05, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
    0.005, 0.01,    0.025, 0.05,   0.1,     0.25,   1};
inline constexpr std::array<double, 15> kRoundBounds = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};

struct CoreCounters {
  double chunks = 0;
  double received = 0;  // bytes
  double sent = 0;      // bytes
  double pushes = 0;
  double aggregations = 0;
  // Observations per bucket, NOT cumulative; [15] is the +Inf bucket.
  std::array<double, 16> aggregation_counts{};
  std::array<double, 16> round_counts{};
};

// One job forming or running: its series carry job="NAME".
struct FakeJob {
  std::string name;
  double running = 0, stalled = 0, world_size = 0, model_bytes = 0;
  double connected = 0, missing = 0;
  double charge = 0;  // bytes of the memory budget
  double weight = 1;
  // The series of issue 38 (phubd 0.1 with per-job progress); `state` empty: no phub_job_state.
  double members = 0, iteration = 0, iterations_per_second = 0;
  double received_bytes = 0, sent_bytes = 0;  // counters
  double rejoin_deadline = 0;                 // unix seconds, 0: none
  std::string state{};
};

struct PhubdState {
  std::string version = "0.1.0";
  std::string protocol = "3";
  std::vector<FakeJob> jobs;  // written in this order; phub_jobs is their number
  double memory_budget = 8.0 * (1 << 30), memory_charged = 0;  // bytes
  double jobs_formed = 0, jobs_stalled = 0, jobs_ended = 0, workers_lost = 0;
  double workers_rejoined = 0, checkpoints = 0, hellos_refused = 0, refused_for_memory = 0;
  double checkpoint_failures = 0;
  double start_time = 1.7e9;  // unix seconds
  double cpu_seconds = 0;
  double resident_bytes = 64 << 20, virtual_bytes = 1 << 30, open_fds = 12, max_fds = 1024;
  std::vector<CoreCounters> cores;
};

std::string MetricsBody(const PhubdState& state);

}  // namespace phub::ctl::fixture
