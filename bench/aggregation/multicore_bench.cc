// multicore_bench: what phubd's aggregation draws with all its cores at once, against the
// memory reference with the same streams on the same cores, in one run: the figure that says
// how many cores and how much memory bandwidth a PBox needs per NIC (docs/design.md, "Sizing a
// PBox").
//
// For each C in --cores: C threads, thread c pinned to core c, each with its own arrays
// (N inputs, weights, a velocity, a destination; first touched by that thread, as a shard's
// are), all released together by a barrier, and timed from the release until the last
// finishes. Measurements, interleaved round by round so a noisy neighbour hits all alike:
//   sum_into_n   dst[i] += in_1[i] + ... + in_N[i] on every thread: the kernel's streams
//                without its arithmetic, (N + 2) x 4 bytes per element
//   fused        AggregateAndStep, momentum (what phub-worker's jobs run), N inputs:
//                (N + 4) x 4 bytes per element
// Reported: GB/s over all C threads, the kernel as a share of the reference with the same C,
// each against C = 1, and the gradient bytes absorbed per second (C x N x 4 x elements / time),
// from which cores per 100 Gbit/s NIC follow. Writes DIR/multicore.tsv and DIR/multicore.md.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "bench/aggregation/streams.h"
#include "fmt/format.h"
#include "phub/common/cpu_pinning.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::bench {
namespace {

struct Options {
  std::size_t mib = 32;  // per array, per thread
  int runs = 7;
  int inputs = 4;
  std::vector<int> cores = {1, 2};
  std::string out = "results/aggregation";
};

// One thread's arrays: what one shard holds for its chunks.
struct ThreadArrays {
  ThreadArrays(std::size_t n, int inputs) {
    for (int k = 0; k < inputs; ++k) {
      in.emplace_back(n, false);
      in.back().FillRandom(100 + k);
      ptrs.push_back(in.back().data());
    }
    weights = std::make_unique<BenchArray>(n, false);
    velocity = std::make_unique<BenchArray>(n, false);
    dst = std::make_unique<BenchArray>(n, false);
    weights->FillRandom(1);
    std::fill_n(velocity->data(), n, 0.0f);
    dst->FillRandom(2);
  }
  std::vector<BenchArray> in;
  std::vector<const float*> ptrs;
  std::unique_ptr<BenchArray> weights, velocity, dst;
};

enum class Kind { kSumIntoN, kFused };
const char* Name(Kind k) { return k == Kind::kSumIntoN ? "sum_into_n" : "fused momentum"; }

struct Result {
  int cores = 0;
  Kind kind = Kind::kSumIntoN;
  double median_ms = 0;
  double gb_per_s = 0;        // all memory traffic, all threads
  double input_gb_per_s = 0;  // gradient bytes summed per second, all threads
};

// Times every measurement with C threads at once; returns the median per measurement.
std::vector<Result> RunWithCores(const Options& opt, int c) {
  const std::size_t n = opt.mib * (std::size_t{1} << 20) / sizeof(float);
  const std::vector<Kind> kinds = {Kind::kSumIntoN, Kind::kFused};
  // seconds[kind][round]: release to last finish.
  std::vector<std::vector<double>> seconds(kinds.size());
  std::barrier sync(c + 1);
  std::vector<std::thread> threads;
  const int rounds = opt.runs + 1;  // the first is a warm-up
  for (int t = 0; t < c; ++t) {
    threads.emplace_back([&, t] {
      if (Status s = PinThisThreadToCore(t); !s.ok()) {
        std::cerr << fmt::format("warning: thread {} not pinned: {}\n", t, s.message());
      }
      ThreadArrays a(n, opt.inputs);
      kernels::OptimizerConfig config;
      config.kind = kernels::OptimizerKind::kMomentum;
      config.weight_decay = 1e-4f;
      float* const state[1] = {a.velocity->data()};
      std::uint64_t step = 0;
      sync.arrive_and_wait();  // arrays ready
      for (int r = 0; r < rounds; ++r) {
        for (Kind kind : kinds) {
          sync.arrive_and_wait();  // released
          if (kind == Kind::kSumIntoN) {
            SumIntoN(std::make_integer_sequence<int, kMaxReferenceInputs>(), opt.inputs,
                     a.dst->data(), a.ptrs.data(), n);
          } else {
            kernels::AggregateAndStep(std::span<const float* const>(a.ptrs), a.weights->span(),
                                      std::span<float* const>(state, 1), config, ++step);
          }
          sync.arrive_and_wait();  // done
        }
      }
    });
  }
  sync.arrive_and_wait();
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      sync.arrive_and_wait();
      const auto start = std::chrono::steady_clock::now();
      sync.arrive_and_wait();
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (r > 0) seconds[k].push_back(s);
    }
    std::cerr << "." << std::flush;
  }
  for (auto& th : threads) th.join();
  std::cerr << "\n";
  std::vector<Result> out;
  for (std::size_t k = 0; k < kinds.size(); ++k) {
    Result r;
    r.cores = c;
    r.kind = kinds[k];
    const double sec = Median(seconds[k]);
    const int bytes_per_element = kinds[k] == Kind::kSumIntoN ? (opt.inputs + 2) * 4
                                                              : (opt.inputs + 4) * 4;
    r.median_ms = sec * 1e3;
    r.gb_per_s = static_cast<double>(c) * bytes_per_element * static_cast<double>(n) / sec / 1e9;
    r.input_gb_per_s = static_cast<double>(c) * opt.inputs * 4.0 * static_cast<double>(n) / sec / 1e9;
    out.push_back(r);
  }
  return out;
}

int Run(const Options& opt) {
  const int max_c = *std::max_element(opt.cores.begin(), opt.cores.end());
  const std::size_t need_mib = opt.mib * static_cast<std::size_t>(opt.inputs + 3) * max_c;
  const std::size_t avail_mib =
      std::strtoull(ProcField("/proc/meminfo", "MemAvailable").c_str(), nullptr, 10) / 1024;
  if (avail_mib > 0 && need_mib > avail_mib * 8 / 10) {
    std::cerr << fmt::format("error: {} MiB needed, {} MiB available: lower --mib\n", need_mib,
                             avail_mib);
    return 1;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  std::vector<Result> all;
  for (int c : opt.cores) {
    if (hw > 0 && static_cast<unsigned>(c) > hw) {
      std::cerr << fmt::format("skipping C = {}: this machine has {} CPUs\n", c, hw);
      continue;
    }
    std::cerr << fmt::format("C = {}: {} threads x {} arrays of {} MiB, {} rounds ", c, c,
                             opt.inputs + 3, opt.mib, opt.runs);
    for (const Result& r : RunWithCores(opt, c)) all.push_back(r);
  }
  auto find = [&](int c, Kind k) -> const Result* {
    for (const Result& r : all) {
      if (r.cores == c && r.kind == k) return &r;
    }
    return nullptr;
  };
  std::string table =
      "| cores C | measurement | median ms | GB/s (all C) | % of sum-into N, same C | vs C = 1 "
      "| gradient GB/s absorbed | per core |\n"
      "|---:|---|---:|---:|---:|---:|---:|---:|\n";
  std::ofstream tsv_stream;
  std::string tsv =
      "cores\tmeasurement\tinputs\tmib\truns\tmedian_ms\tgb_per_s\tpct_of_reference\tscaling\t"
      "input_gb_per_s\tinput_gb_per_s_per_core\n";
  for (const Result& r : all) {
    const Result* ref = find(r.cores, Kind::kSumIntoN);
    const Result* one = find(1, r.kind);
    const double pct = 100.0 * r.gb_per_s / ref->gb_per_s;
    const double scaling = one ? r.gb_per_s / one->gb_per_s : 0;
    table += fmt::format("| {} | {} | {:.1f} | {:.2f} | {:.1f} | {} | {:.2f} | {:.2f} |\n",
                         r.cores, Name(r.kind), r.median_ms, r.gb_per_s, pct,
                         one ? fmt::format("{:.2f}x", scaling) : "-", r.input_gb_per_s,
                         r.input_gb_per_s / r.cores);
    tsv += fmt::format("{}\t{}\t{}\t{}\t{}\t{:.3f}\t{:.3f}\t{:.2f}\t{:.3f}\t{:.3f}\t{:.3f}\n",
                       r.cores, Name(r.kind), opt.inputs, opt.mib, opt.runs, r.median_ms,
                       r.gb_per_s, pct, scaling, r.input_gb_per_s, r.input_gb_per_s / r.cores);
  }
  std::cout << table;
  std::error_code ec;
  std::filesystem::create_directories(opt.out, ec);
  const std::string tsv_path = opt.out + "/multicore.tsv", md_path = opt.out + "/multicore.md";
  std::ofstream(tsv_path) << tsv;
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M", std::localtime(&now));
  std::ofstream md(md_path);
  md << fmt::format(
      "# Aggregation with C cores at once\n\nN = {} inputs, {} MiB per array per thread, each "
      "thread pinned to its core with its own arrays; median of {} interleaved rounds after one "
      "warm-up; {}, {}. Bytes per element: sum-into N (N+2)*4, fused momentum (N+4)*4.\n\n{}",
      opt.inputs, opt.mib, opt.runs, ProcField("/proc/cpuinfo", "model name"), date, table);
  md.close();
  if (!md || ec) {
    std::cerr << fmt::format("error: could not write {} (disk full? permissions?)\n", md_path);
    return 1;
  }
  std::cerr << "wrote " << tsv_path << " and " << md_path << "\n";
  return 0;
}

}  // namespace
}  // namespace phub::bench

int main(int argc, char** argv) {
  phub::bench::Options opt;
  CLI::App app{"The fused aggregation kernel on C cores at once vs the same streams' reference"};
  app.add_option("--mib", opt.mib, "Size of each array, per thread, MiB")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--runs", opt.runs, "Timed rounds (median reported)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1000));
  app.add_option("--inputs", opt.inputs, "Workers' copies N summed per element")
      ->capture_default_str()
      ->check(CLI::Range(1, phub::bench::kMaxReferenceInputs));
  app.add_option("--cores", opt.cores, "Thread counts C to run (threads pinned to cores 0..C-1)")
      ->capture_default_str()
      ->check(CLI::Range(1, 1024));
  app.add_option("--out", opt.out, "Directory for multicore.tsv and multicore.md")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return phub::bench::Run(opt);
  } catch (const std::bad_alloc&) {
    std::cerr << "error: out of memory allocating the arrays: lower --mib\n";
    return 1;
  }
}
