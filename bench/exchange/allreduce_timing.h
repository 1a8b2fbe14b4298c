// The timing loop, data, result check and output of an allreduce rank in the `exchange`
// benchmark, written once for the external baselines (gloo_worker.cc, mpi_worker.cc,
// nccl_worker.cc). It follows ring_worker.cc (our own ring) rule for rule, so their numbers and
// files compare:
//
//   data      rank r's buffer starts at r + 1 everywhere;
//   iteration barrier() (a 1-float allreduce, or the library's barrier), t0, sum(), t1, then
//             the buffer is scaled by 1/N outside the timed span: after each iteration every
//             element is the mean (N + 1) / 2, computed exactly as phub::ring's kMean does
//             (sum, then multiply by 1.0f / N), so the final buffer and its checksum are the
//             same bytes as phub_ring_worker's;
//   output    "iter t0_ns t1_ns seconds" per timed iteration (warm-up excluded), then
//             "checksum <FNV-1a 64 of the buffer>".
//
// Why the scaling is not timed: Gloo and MPI have no mean, a user would sum and then scale.
// Leaving that pass out of their time favours them slightly, which is the safe direction for
// a baseline (our ring's time includes its fused scaling).
//
// A library whose buffer is not `data` (NCCL: GPU memory) passes its own `scale()`: it brings
// the sum into `data`, applies ScaleToMean and puts the result back, all untimed, so the
// check and checksum read the same bytes as everyone else's.
//
// Exit codes (the worker's return value): 0 done; 3 a library call failed; 4 wrong result;
// 5 cannot write the output. Bad flags: 2, or CLI11's own non-zero code.
//
// Not thread-safe; one call per process.
#pragma once

#include <absl/status/status.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace phub::bench {

struct AllreduceRun {
  std::string label;  // first line of the output file, e.g. "phub_gloo_worker algo=ring-chunked"
  int rank = 0;
  int world = 1;
  double mib = 4;
  int iters = 10;
  int warmup = 2;
  std::string out_path;
};

inline std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::uint64_t Fnv1a64(std::span<const float> values) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (float v : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    hash = (hash ^ bits) * 0x100000001b3ULL;
  }
  return hash;
}

inline int Fail(const absl::Status& status, int code) {
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return code;
}

// Rank r's starting buffer: --mib MiB of floats, all r + 1.
inline std::vector<float> InitialData(const AllreduceRun& run) {
  const std::size_t n = static_cast<std::size_t>(run.mib * (1 << 20) / sizeof(float));
  return std::vector<float>(n, static_cast<float>(run.rank + 1));
}

// The untimed pass after each sum: every element times 1.0f / N, exactly as phub::ring's kMean.
inline void ScaleToMean(const AllreduceRun& run, std::span<float> data) {
  const float scale = 1.0f / static_cast<float>(run.world);
  for (float& v : data) v *= scale;
}

// Runs the loop above on `data` (from InitialData; the libraries may hold pointers into it, so
// it is never reallocated). `barrier()` must return only once every rank has called it;
// `sum()` must replace data with the element-wise sum over ranks; `scale()` (untimed) must
// leave the mean in `data` (and wherever sum() reads from). All three return a Status and are
// called warmup + iters times, in the same order on every rank. Returns the exit code.
template <typename Barrier, typename Sum, typename Scale>
int RunTimedAllreduce(const AllreduceRun& run, std::vector<float>& data, Barrier&& barrier,
                      Sum&& sum, Scale&& scale) {
  const std::size_t n = data.size();
  std::FILE* out = std::fopen(run.out_path.c_str(), "w");
  if (out == nullptr) return Fail(absl::UnavailableError("cannot open --out " + run.out_path), 5);
  std::fprintf(out, "# %s rank=%d world=%d bytes=%zu iters=%d warmup=%d\n", run.label.c_str(),
               run.rank, run.world, n * sizeof(float), run.iters, run.warmup);
  std::fprintf(out, "iter\tt0_ns\tt1_ns\tseconds\n");
  for (int it = 0; it < run.warmup + run.iters; ++it) {
    if (absl::Status s = barrier(); !s.ok()) return Fail(s, 3);
    const std::int64_t t0 = NowNs();
    if (absl::Status s = sum(); !s.ok()) return Fail(s, 3);
    const std::int64_t t1 = NowNs();
    if (absl::Status s = scale(); !s.ok()) return Fail(s, 3);
    if (it >= run.warmup) {
      std::fprintf(out, "%d\t%" PRId64 "\t%" PRId64 "\t%.9f\n", it - run.warmup, t0, t1,
                   (t1 - t0) * 1e-9);
    }
  }
  const float expected = (run.world + 1) / 2.0f;
  for (std::size_t i = 0; i < n; i += 4099) {
    if (std::fabs(data[i] - expected) > 1e-4f) {
      std::fprintf(stderr, "element %zu is %g, expected %g\n", i, data[i], expected);
      std::fclose(out);
      return 4;
    }
  }
  std::fprintf(out, "checksum\t%016" PRIx64 "\n", Fnv1a64(data));
  return std::fclose(out) == 0 ? 0 : 5;
}

// The same, for libraries that sum in `data` itself: scale() is ScaleToMean on `data`.
template <typename Barrier, typename Sum>
int RunTimedAllreduce(const AllreduceRun& run, std::vector<float>& data, Barrier&& barrier,
                      Sum&& sum) {
  return RunTimedAllreduce(run, data, std::forward<Barrier>(barrier), std::forward<Sum>(sum),
                           [&] {
                             ScaleToMean(run, data);
                             return absl::OkStatus();
                           });
}

}  // namespace phub::bench
