// aggregation_bench: how close the fused aggregate+optimizer kernel comes to the memory
// bandwidth one core can draw. In one process, on arrays of --mib MiB, it measures
//   memcpy            bytes = 2 x 4 per element (read src, write dst)
//   sum_into          dst[i] += src[i]; bytes = 3 x 4 (read dst, read src, write dst)
//   sum_into_n        dst[i] += src_1[i] + ... + src_N[i], for each N in --inputs (N <= 8);
//                     bytes = (N + 2) x 4: the kernel's streams (N read, one read+written)
//                     without its arithmetic or state
//   fused             AggregateAndStep for each N in --inputs and every optimizer;
//                     bytes = (N + 2 x state_arrays + 2) x 4 (inputs read; weights and state
//                     read and written); and momentum out of place (old weights read from one
//                     array, new ones written to another: what phubd runs to keep the
//                     previous weights for a rejoin), the same bytes
// Each measurement runs once as a warm-up, then --runs rounds in which every measurement runs
// once (interleaved, so a slow spell of a shared machine hits all alike); the median is kept.
// The kernel's GB/s is reported as a share of sum_into's (target >= 80 %), of sum_into_n's with
// the same N (how much the arithmetic and state cost beyond the streams) and of memcpy's.
// Writes DIR/aggregation.tsv and DIR/aggregation.md (--out, default results/aggregation);
// progress goes to stderr, the table to stdout. Single-threaded, pinned to one core (--core).
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "fmt/format.h"
#include "phub/common/cpu_pinning.h"
#include "phub/kernels/aggregate_and_step.h"
#include "bench/aggregation/streams.h"

namespace phub::bench {
namespace {

using kernels::OptimizerKind;

struct Options {
  std::size_t mib = 64;  // Size of each array (input, weights, state), MiB.
  int runs = 9;          // Timed rounds (median reported).
  std::vector<int> inputs = {2, 4, 8};
  std::string out = "results/aggregation";
  int core = 0;             // Physical core to pin to; -1 leaves the thread unpinned.
  bool huge_pages = false;  // madvise(MADV_HUGEPAGE) on every array before first touch.
};

struct Row {
  std::string kernel;     // "memcpy", "sum_into", "sum_into_n", "fused"
  std::string optimizer;  // "-" but for fused rows
  int inputs = 0;         // N; 0 for memcpy and sum_into
  int state_arrays = 0;
  int bytes_per_element = 0;
  double median_ms = 0;
  double gb_per_s = 0;
  double pct_sum_into = 0;
  double pct_sum_into_n = -1;  // < 0: no sum_into_n row for this N.
  double pct_memcpy = 0;

  std::string Label() const {
    if (kernel == "fused") return fmt::format("{} N={}", optimizer, inputs);
    if (kernel == "sum_into_n") return fmt::format("sum_into N={}", inputs);
    if (kernel == "sum_into_n_bf16") return fmt::format("sum_into bf16 N={}", inputs);
    return kernel;
  }
  // Plot series: one per optimizer, plus the stream-only reference.
  std::string Series() const {
    return kernel == "fused"             ? optimizer
           : kernel == "sum_into_n"      ? "sum-into N (no optimizer)"
           : kernel == "sum_into_n_bf16" ? "sum-into N, bf16 inputs (no optimizer)"
                                         : kernel;
  }
};

// One thing to time: its row in the results and the call that does it once.
struct Measurement {
  Row row;
  std::function<void()> fn;
  std::vector<double> seconds = {};
};

void TimeAll(std::vector<Measurement>& ms, int runs) {
  for (std::size_t i = 0; i < ms.size(); ++i) {
    std::cerr << fmt::format("[warm-up {}/{}] {}\n", i + 1, ms.size(), ms[i].row.Label());
    ms[i].fn();
  }
  for (int r = 0; r < runs; ++r) {
    std::cerr << fmt::format("[round {}/{}] ", r + 1, runs) << std::flush;
    for (Measurement& m : ms) {
      const auto start = std::chrono::steady_clock::now();
      m.fn();
      const auto stop = std::chrono::steady_clock::now();
      m.seconds.push_back(std::chrono::duration<double>(stop - start).count());
      std::cerr << "." << std::flush;
    }
    std::cerr << "\n";
  }
}

std::string Percent(double pct) { return pct < 0 ? "-" : fmt::format("{:.1f}", pct); }

std::string Table(const std::vector<Row>& rows) {
  std::string t =
      "| kernel | N | bytes/elem | median ms | GB/s | % of sum-into | % of sum-into N "
      "| % of memcpy |\n"
      "|---|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const Row& r : rows) {
    t += fmt::format("| {} | {} | {} | {:.2f} | {:.2f} | {} | {} | {} |\n",
                     r.kernel == "fused" ? "fused " + r.optimizer : r.kernel,
                     r.inputs > 0 ? std::to_string(r.inputs) : "-", r.bytes_per_element,
                     r.median_ms, r.gb_per_s, Percent(r.pct_sum_into), Percent(r.pct_sum_into_n),
                     Percent(r.pct_memcpy));
  }
  return t;
}

Status WriteResults(const Options& opt, const std::vector<Row>& rows, const std::string& table,
                    const std::string& huge_kib) {
  std::error_code ec;
  std::filesystem::create_directories(opt.out, ec);
  if (ec) {
    return absl::UnavailableError(
        fmt::format("cannot create --out directory '{}': {}", opt.out, ec.message()));
  }
  const std::string tsv_path = opt.out + "/aggregation.tsv";
  std::ofstream tsv(tsv_path);
  tsv << "kernel\toptimizer\tinputs\tstate_arrays\tlabel\tseries\tmib\tpages\tbytes_per_element"
         "\truns\tmedian_ms\tgb_per_s\tpct_of_sum_into\tpct_of_sum_into_n\tpct_of_memcpy\n";
  for (const Row& r : rows) {
    tsv << fmt::format(
        "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{:.4f}\t{:.3f}\t{:.2f}\t{}\t{:.2f}\n", r.kernel,
        r.optimizer, r.inputs, r.state_arrays, r.Label(), r.Series(), opt.mib,
        opt.huge_pages ? "2M" : "4K", r.bytes_per_element, opt.runs, r.median_ms, r.gb_per_s,
        r.pct_sum_into, r.pct_sum_into_n < 0 ? "" : fmt::format("{:.2f}", r.pct_sum_into_n),
        r.pct_memcpy);
  }
  const std::string md_path = opt.out + "/aggregation.md";
  std::ofstream md(md_path);
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  md << fmt::format(
      "# Fused aggregation + optimizer bandwidth\n\n"
      "{} MiB per array, one thread{}, {} pages (AnonHugePages after allocation: {}), median of "
      "{} interleaved rounds after one warm-up; {}, {}.\n"
      "GB/s = 1e9 bytes/s; bytes per element: memcpy 8, sum-into 12, sum-into N (N+2)*4, fused "
      "(N + 2*state + 2)*4.\n\n",
      opt.mib, opt.core >= 0 ? fmt::format(" pinned to core {}", opt.core) : "",
      opt.huge_pages ? "transparent huge (MADV_HUGEPAGE)" : "default", huge_kib, opt.runs,
      ProcField("/proc/cpuinfo", "model name"), date);
  md << table;
  tsv.close();
  md.close();
  if (!tsv || !md) {
    return absl::UnavailableError(
        fmt::format("could not write {} or {} (disk full? permissions?)", tsv_path, md_path));
  }
  std::cerr << "wrote " << tsv_path << " and " << md_path << "\n";
  return absl::OkStatus();
}

int Run(const Options& opt) {
  if (opt.core >= 0) {
    if (Status s = PinThisThreadToCore(opt.core); !s.ok()) {
      std::cerr << "warning: could not pin to core " << opt.core << ": " << s.message()
                << " (running unpinned)\n";
    }
  }
  const std::size_t n = opt.mib * (std::size_t{1} << 20) / sizeof(float);
  const int max_inputs = std::max(2, *std::max_element(opt.inputs.begin(), opt.inputs.end()));
  // Inputs in float32 and again in bf16 and fp16 (2 + 2 bytes), weights, state, destination.
  const std::size_t need_mib = opt.mib * static_cast<std::size_t>(2 * max_inputs + 4);
  // Refuse what the machine cannot hold rather than be killed by the OOM killer mid-fill.
  const std::string avail_kb = ProcField("/proc/meminfo", "MemAvailable");
  if (const std::size_t avail_mib = std::strtoull(avail_kb.c_str(), nullptr, 10) / 1024;
      avail_mib > 0 && need_mib > avail_mib * 8 / 10) {
    std::cerr << fmt::format(
        "error: --mib {} with N up to {} needs {} MiB, but only {} MiB are available: lower "
        "--mib or the largest --inputs\n",
        opt.mib, max_inputs, need_mib, avail_mib);
    return 1;
  }
  std::cerr << fmt::format(
      "aggregation_bench: {} MiB per array ({} floats), {} rounds, {} MiB allocated, {} pages\n",
      opt.mib, n, opt.runs, need_mib, opt.huge_pages ? "huge" : "default");

  // Inputs 0..max-1, weights, two state arrays and a destination for the references.
  std::vector<BenchArray> inputs;
  for (int k = 0; k < max_inputs; ++k) {
    inputs.emplace_back(n, opt.huge_pages);
    inputs.back().FillRandom(100 + k);
  }
  BenchArray weights(n, opt.huge_pages), state0(n, opt.huge_pages), state1(n, opt.huge_pages),
      dst(n, opt.huge_pages);
  weights.FillRandom(1);
  std::fill_n(state0.data(), n, 0.0f);
  std::fill_n(state1.data(), n, 0.0f);
  dst.FillRandom(2);
  const std::string huge_kib = ProcField("/proc/self/smaps_rollup", "AnonHugePages");
  std::vector<const float*> input_ptrs;
  for (auto& b : inputs) input_ptrs.push_back(b.data());
  // The same inputs rounded to the compact wire formats (--wire bf16|fp16), for the kernel's
  // rows over them: half the input bytes.
  std::vector<std::vector<kernels::Bf16>> bf16_inputs;
  std::vector<std::vector<kernels::Fp16>> fp16_inputs;
  std::vector<const kernels::Bf16*> bf16_ptrs;
  std::vector<const kernels::Fp16*> fp16_ptrs;
  std::vector<const std::uint16_t*> bf16_bits;
  for (auto& b : inputs) {
    bf16_inputs.emplace_back(n);
    fp16_inputs.emplace_back(n);
    kernels::Convert(std::span<const float>(b.data(), n), std::span<kernels::Bf16>(bf16_inputs.back()));
    kernels::Convert(std::span<const float>(b.data(), n), std::span<kernels::Fp16>(fp16_inputs.back()));
    bf16_ptrs.push_back(bf16_inputs.back().data());
    fp16_ptrs.push_back(fp16_inputs.back().data());
    bf16_bits.push_back(&bf16_inputs.back().data()->bits);
  }

  std::vector<Measurement> ms;
  const float* const src = inputs[0].data();
  float* const d = dst.data();
  ms.push_back({{.kernel = "memcpy", .optimizer = "-", .bytes_per_element = 8},
                [=] { std::memcpy(d, src, n * sizeof(float)); }});
  ms.push_back({{.kernel = "sum_into", .optimizer = "-", .bytes_per_element = 12},
                [=] { SumInto(d, src, n); }});
  for (int n_in : opt.inputs) {
    if (n_in > kMaxReferenceInputs) continue;
    const float* const* s = input_ptrs.data();
    ms.push_back(
        {{.kernel = "sum_into_n",
          .optimizer = "-",
          .inputs = n_in,
          .bytes_per_element = (n_in + 2) * 4},
         [=] { SumIntoN(std::make_integer_sequence<int, kMaxReferenceInputs>(), n_in, d, s, n); }});
    const std::uint16_t* const* sb = bf16_bits.data();
    ms.push_back({{.kernel = "sum_into_n_bf16",
                   .optimizer = "-",
                   .inputs = n_in,
                   .bytes_per_element = n_in * 2 + 8},
                  [=] {
                    SumIntoNBf16(std::make_integer_sequence<int, kMaxReferenceInputs>(), n_in, d,
                                 sb, n);
                  }});
  }

  // The optimizers share the state arrays (Adam's s, only Adam's, stays >= 0); each keeps its
  // own step count (Adam's t). Values stay bounded: velocities ~|g|/(1-mu), and the weights
  // drift by ~lr per call. The references write only `dst`, so the kernel's inputs stay the
  // gradients of order 1 they were filled with.
  float* const state_ptrs[2] = {state0.data(), state1.data()};
  const std::span<float> w = weights.span();
  for (int n_in : opt.inputs) {
    for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                               OptimizerKind::kNesterov, OptimizerKind::kAdam}) {
      kernels::OptimizerConfig config;
      config.kind = kind;
      config.lr = kind == OptimizerKind::kAdam ? 1e-3f : 1e-2f;
      config.weight_decay = 1e-4f;
      const int n_state = kernels::StateArrays(kind);
      const std::span<const float* const> in(input_ptrs.data(), n_in);
      const std::span<float* const> st(state_ptrs, n_state);
      ms.push_back({{.kernel = "fused",
                     .optimizer = kernels::OptimizerName(kind),
                     .inputs = n_in,
                     .state_arrays = n_state,
                     .bytes_per_element = (n_in + 2 * n_state + 2) * 4},
                    [=, step = std::uint64_t{0}]() mutable {
                      kernels::AggregateAndStep(in, w, st, config, ++step);
                    }});
    }
    // What phubd runs when it keeps each chunk's previous weights (for a worker that rejoins):
    // the same pass, out of place (old weights read from one buffer, new ones written to
    // another); it should match the in-place row, where a copy of the weights would add a
    // memcpy of them per step.
    kernels::OptimizerConfig config;
    config.kind = OptimizerKind::kMomentum;
    config.weight_decay = 1e-4f;
    const std::span<const float* const> in(input_ptrs.data(), n_in);
    const std::span<float* const> st(state_ptrs, 1);
    const std::span<const float> w_in = weights.span();
    const std::span<float> w_out(d, n);
    // The wire's compact formats: momentum over bf16 and fp16 copies, (2N + 8 + 8) bytes.
    const std::span<const kernels::Bf16* const> in_bf16(bf16_ptrs.data(), n_in);
    const std::span<const kernels::Fp16* const> in_fp16(fp16_ptrs.data(), n_in);
    ms.push_back({{.kernel = "fused",
                   .optimizer = "momentum bf16",
                   .inputs = n_in,
                   .state_arrays = 1,
                   .bytes_per_element = n_in * 2 + 16},
                  [=, step = std::uint64_t{0}]() mutable {
                    kernels::AggregateAndStep(in_bf16, w, st, config, ++step);
                  }});
    ms.push_back({{.kernel = "fused",
                   .optimizer = "momentum fp16",
                   .inputs = n_in,
                   .state_arrays = 1,
                   .bytes_per_element = n_in * 2 + 16},
                  [=, step = std::uint64_t{0}]() mutable {
                    kernels::AggregateAndStep(in_fp16, w, st, config, ++step);
                  }});
    ms.push_back({{.kernel = "fused",
                   .optimizer = "momentum out-of-place",
                   .inputs = n_in,
                   .state_arrays = 1,
                   .bytes_per_element = (n_in + 2 + 2) * 4},
                  [=, step = std::uint64_t{0}]() mutable {
                    kernels::AggregateAndStep(in, w_in, w_out, st, config, ++step);
                  }});
  }
  TimeAll(ms, opt.runs);

  std::vector<Row> rows;
  for (Measurement& m : ms) {
    Row row = m.row;
    const double sec = Median(m.seconds);
    row.median_ms = sec * 1e3;
    row.gb_per_s = row.bytes_per_element * static_cast<double>(n) / sec / 1e9;
    rows.push_back(row);
  }
  const double memcpy_gbs = rows[0].gb_per_s, sum_gbs = rows[1].gb_per_s;
  for (Row& r : rows) {
    r.pct_sum_into = 100.0 * r.gb_per_s / sum_gbs;
    r.pct_memcpy = 100.0 * r.gb_per_s / memcpy_gbs;
    if (r.kernel != "fused") continue;
    // Compact-input rows against the reference with the same input format.
    const bool compact = r.optimizer.find("bf16") != std::string::npos ||
                         r.optimizer.find("fp16") != std::string::npos;
    for (const Row& ref : rows) {
      if (ref.kernel == (compact ? "sum_into_n_bf16" : "sum_into_n") && ref.inputs == r.inputs) {
        r.pct_sum_into_n = 100.0 * r.gb_per_s / ref.gb_per_s;
      }
    }
  }

  const std::string table = Table(rows);
  std::cout << table;
  if (Status s = WriteResults(opt, rows, table, huge_kib); !s.ok()) {
    std::cerr << "error: " << s.message() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace
}  // namespace phub::bench

int main(int argc, char** argv) {
  phub::bench::Options opt;
  CLI::App app{"Bandwidth of the fused aggregation+optimizer kernel vs memcpy and sum-into"};
  app.add_option("--mib", opt.mib, "Size of each array (input, weights, state) in MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--runs", opt.runs,
                 "Timed rounds, every measurement once per round (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--inputs", opt.inputs, "Input counts N to measure the kernel with")
      ->capture_default_str()
      ->check(CLI::Range(1, 64));
  app.add_option("--out", opt.out, "Directory for aggregation.tsv and aggregation.md")
      ->capture_default_str();
  app.add_option("--core", opt.core, "Physical core to pin to (-1: do not pin)")
      ->capture_default_str();
  app.add_flag("--huge-pages", opt.huge_pages,
               "Back every array with transparent huge pages (madvise MADV_HUGEPAGE)");
  CLI11_PARSE(app, argc, argv);
  try {
    return phub::bench::Run(opt);
  } catch (const std::bad_alloc&) {
    std::cerr
        << "error: out of memory allocating the arrays: lower --mib or the largest --inputs\n";
    return 1;
  }
}
