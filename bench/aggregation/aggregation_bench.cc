// aggregation_bench: how close the fused aggregate+optimizer kernel comes to the memory
// bandwidth one core can draw. In one process, on chunks of --mib MiB per array, it measures
//   memcpy                 bytes = 2 x 4 per element (read src, write dst)
//   sum-into               dst[i] += src[i]; bytes = 3 x 4 (read dst, read src, write dst)
//   AggregateAndStep       for N in --inputs and every optimizer;
//                          bytes = (N + 2 x state_arrays + 2) x 4 (inputs read; weights and
//                          state read and written)
// Each measurement is one warm-up run then the median of --runs timed runs (steady_clock).
// The kernel's GB/s is reported as a share of sum-into's (the loop with the same access
// pattern and no arithmetic: the target is >= 80 %) and of memcpy's.
// Writes DIR/aggregation.tsv and DIR/aggregation.md (--out, default results/aggregation);
// progress goes to stderr, the table to stdout. Single-threaded, pinned to one core (--core).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "fmt/format.h"
#include "phub/common/aligned_buffer.h"
#include "phub/common/cpu_pinning.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::bench {
namespace {

using kernels::OptimizerKind;

struct Options {
  std::size_t mib = 64;          // Chunk size per array, MiB.
  int runs = 5;                  // Timed runs per measurement (median reported).
  std::vector<int> inputs = {2, 4, 8};
  std::string out = "results/aggregation";
  int core = 0;                  // Physical core to pin to; -1 leaves the thread unpinned.
};

struct Row {
  std::string kernel;     // "memcpy", "sum_into", "fused"
  std::string optimizer;  // "-" for the references
  int inputs = 0;         // N; 0 for the references
  int state_arrays = 0;
  int bytes_per_element = 0;
  double median_ms = 0;
  double gb_per_s = 0;
  double pct_sum_into = 0;
  double pct_memcpy = 0;

  std::string Label() const {
    if (kernel != "fused") return kernel;
    return fmt::format("{} N={}", optimizer, inputs);
  }
};

// dst[i] += src[i]: the reference loop. noinline so it is compiled as a plain streaming loop.
[[gnu::noinline]] void SumInto(float* __restrict dst, const float* __restrict src,
                               std::size_t n) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// One warm-up call, then the median wall time of `runs` calls, in seconds.
double MedianSeconds(int runs, const std::function<void()>& fn) {
  fn();
  std::vector<double> times;
  for (int r = 0; r < runs; ++r) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const auto stop = std::chrono::steady_clock::now();
    times.push_back(std::chrono::duration<double>(stop - start).count());
  }
  std::sort(times.begin(), times.end());
  const std::size_t mid = times.size() / 2;
  return times.size() % 2 ? times[mid] : 0.5 * (times[mid - 1] + times[mid]);
}

void FillRandom(AlignedBuffer& buf, std::uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  for (float& x : buf.span()) x = dist(rng);
}

std::string CpuModel() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown CPU";
}

std::string Table(const std::vector<Row>& rows) {
  std::string t =
      "| kernel | N | bytes/elem | median ms | GB/s | % of sum-into | % of memcpy |\n"
      "|---|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    t += fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {:.1f} | {:.1f} |\n",
                     r.kernel == "fused" ? "fused " + r.optimizer : r.kernel,
                     r.inputs > 0 ? std::to_string(r.inputs) : "-", r.bytes_per_element,
                     r.median_ms, r.gb_per_s, r.pct_sum_into, r.pct_memcpy);
  }
  return t;
}

int Run(const Options& opt) {
  if (opt.core >= 0) {
    if (Status s = PinThisThreadToCore(opt.core); !s.ok()) {
      std::cerr << "warning: could not pin to core " << opt.core << ": " << s.message()
                << " (running unpinned)\n";
    }
  }
  const std::size_t n = opt.mib * (std::size_t{1} << 20) / sizeof(float);
  const int max_inputs = *std::max_element(opt.inputs.begin(), opt.inputs.end());
  const double mib_total = static_cast<double>(opt.mib) * (max_inputs + 3);
  std::cerr << fmt::format("aggregation_bench: {} MiB per array ({} floats), {} runs, {:.0f} MiB "
                           "allocated\n",
                           opt.mib, n, opt.runs, mib_total);

  // Inputs 0..max-1, weights, two state arrays. memcpy and sum-into reuse inputs 0 and 1.
  std::vector<AlignedBuffer> inputs;
  for (int k = 0; k < max_inputs; ++k) {
    inputs.emplace_back(n);
    FillRandom(inputs.back(), 100 + k, -1.0f, 1.0f);
  }
  AlignedBuffer weights(n), state0(n), state1(n);
  FillRandom(weights, 1, -1.0f, 1.0f);
  std::vector<const float*> input_ptrs;
  for (auto& b : inputs) input_ptrs.push_back(b.data());

  const OptimizerKind kinds[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                 OptimizerKind::kNesterov, OptimizerKind::kAdam};
  const int total = 2 + static_cast<int>(opt.inputs.size()) * 4;
  int done = 0;
  auto progress = [&](const std::string& what) {
    std::cerr << fmt::format("[{}/{}] {} ...", ++done, total, what) << std::flush;
  };
  auto measure = [&](Row row, const std::function<void()>& fn) {
    progress(row.Label());
    const double sec = MedianSeconds(opt.runs, fn);
    row.median_ms = sec * 1e3;
    row.gb_per_s = static_cast<double>(row.bytes_per_element) * n / sec / 1e9;
    std::cerr << fmt::format(" {:.2f} GB/s\n", row.gb_per_s);
    return row;
  };

  std::vector<Row> rows;
  float* const a = inputs[0].data();
  float* const b = max_inputs > 1 ? inputs[1].data() : weights.data();
  rows.push_back(measure({.kernel = "memcpy", .optimizer = "-", .bytes_per_element = 8},
                         [&] { std::memcpy(b, a, n * sizeof(float)); }));
  rows.push_back(measure({.kernel = "sum_into", .optimizer = "-", .bytes_per_element = 12},
                         [&] { SumInto(b, a, n); }));
  const double memcpy_gbs = rows[0].gb_per_s, sum_gbs = rows[1].gb_per_s;
  // Restore input 1 so the kernel sees gradients of order 1 again.
  FillRandom(inputs[1], 101, -1.0f, 1.0f);

  for (int n_in : opt.inputs) {
    for (OptimizerKind kind : kinds) {
      kernels::OptimizerConfig config;
      config.kind = kind;
      config.lr = kind == OptimizerKind::kAdam ? 1e-3f : 1e-2f;
      config.weight_decay = 1e-4f;
      const int n_state = kernels::StateArrays(kind);
      std::fill_n(state0.data(), n, 0.0f);
      std::fill_n(state1.data(), n, 0.0f);
      float* state_ptrs[2] = {state0.data(), state1.data()};
      std::uint64_t step = 0;
      Row row{.kernel = "fused",
              .optimizer = kernels::OptimizerName(kind),
              .inputs = n_in,
              .state_arrays = n_state,
              .bytes_per_element = (n_in + 2 * n_state + 2) * 4};
      rows.push_back(measure(row, [&] {
        kernels::AggregateAndStep(std::span<const float* const>(input_ptrs.data(), n_in),
                                  weights.span(), std::span<float* const>(state_ptrs, n_state),
                                  config, ++step);
      }));
    }
  }
  for (Row& r : rows) {
    r.pct_sum_into = 100.0 * r.gb_per_s / sum_gbs;
    r.pct_memcpy = 100.0 * r.gb_per_s / memcpy_gbs;
  }

  // ---- Results: stdout table, TSV, Markdown. ----
  const std::string table = Table(rows);
  std::cout << table;

  std::filesystem::create_directories(opt.out);
  const std::string tsv_path = opt.out + "/aggregation.tsv";
  std::ofstream tsv(tsv_path);
  tsv << "kernel\toptimizer\tinputs\tstate_arrays\tlabel\tmib\tbytes_per_element\truns\t"
         "median_ms\tgb_per_s\tpct_of_sum_into\tpct_of_memcpy\n";
  for (const Row& r : rows) {
    tsv << fmt::format("{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.4f}\t{:.3f}\t{:.2f}\t{:.2f}\n", r.kernel,
                       r.optimizer, r.inputs, r.state_arrays, r.Label(), opt.mib,
                       r.bytes_per_element, opt.runs, r.median_ms, r.gb_per_s, r.pct_sum_into,
                       r.pct_memcpy);
  }
  const std::string md_path = opt.out + "/aggregation.md";
  std::ofstream md(md_path);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  md << fmt::format(
      "# Fused aggregation + optimizer bandwidth\n\n"
      "{} MiB per array, single thread{}, median of {} runs after one warm-up; {} ({}).\n"
      "GB/s = 1e9 bytes/s; bytes counted per element: memcpy 8, sum-into 12, fused "
      "(N + 2*state + 2)*4.\n\n",
      opt.mib, opt.core >= 0 ? fmt::format(" pinned to core {}", opt.core) : "", opt.runs,
      CpuModel(), date);
  md << table;
  if (!tsv || !md) {
    std::cerr << "error: could not write " << tsv_path << " or " << md_path << "\n";
    return 1;
  }
  std::cerr << "wrote " << tsv_path << " and " << md_path << "\n";
  return 0;
}

}  // namespace
}  // namespace phub::bench

int main(int argc, char** argv) {
  phub::bench::Options opt;
  CLI::App app{"Bandwidth of the fused aggregation+optimizer kernel vs memcpy and sum-into"};
  app.add_option("--mib", opt.mib, "Chunk size per array in MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--runs", opt.runs, "Timed runs per measurement (median reported, >= 1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--inputs", opt.inputs, "Input counts N to measure the kernel with")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--out", opt.out, "Directory for aggregation.tsv and aggregation.md")
      ->capture_default_str();
  app.add_option("--core", opt.core, "Physical core to pin to (-1: do not pin)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return phub::bench::Run(opt);
}
