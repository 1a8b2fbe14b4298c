// phub_ring_worker: one rank of the ring-allreduce side of the `exchange` benchmark, the
// baseline next to phub_exchange_worker (same timing rule, same output format).
//
// Each iteration: Allreduce(1 float) aligns starts (it completes only once every rank joined);
// t0; Allreduce(--mib MiB, mean); t1. Rank r's data starts at r + 1, so after every mean the
// buffer holds (N + 1) / 2 everywhere; the worker checks that and writes an FNV-1a checksum
// of its buffer, which must be the same on every rank.
//
// Output (--out, TSV): "iter t0_ns t1_ns seconds" per timed iteration, then "checksum <hex>".
// Exit codes: 0 done; 2 bad flags; 3 a ring call failed; 4 wrong result; 5 cannot write.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "phub/common/logging.h"
#include "phub/ring/ring_allreduce.h"

namespace {

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::uint64_t Fnv1a64(const std::vector<float>& values) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (float v : values) {
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    hash = (hash ^ bits) * 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace

int main(int argc, char** argv) {
  phub::ring::RingOptions options;
  double mib = 4;
  int iters = 10, warmup = 2;
  std::string out_path;
  CLI::App app{"PHub exchange benchmark: one ring-allreduce rank"};
  app.add_option("--rank", options.rank)->required();
  app.add_option("--world", options.world_size)->required();
  app.add_option("--rendezvous", options.rendezvous_dir, "Directory shared by all ranks")->required();
  app.add_option("--mib", mib, "Buffer size in MiB")->capture_default_str();
  app.add_option("--iters", iters)->capture_default_str();
  app.add_option("--warmup", warmup)->capture_default_str();
  app.add_option("--piece-bytes", options.piece_bytes, "Pipelining granularity")->capture_default_str();
  app.add_option("--out", out_path)->required();
  CLI11_PARSE(app, argc, argv);
  (void)phub::SetUpLogging("warn", "ring " + std::to_string(options.rank));

  auto ring = phub::ring::RingAllreduce::Connect(options);
  if (!ring.ok()) {
    std::fprintf(stderr, "%s\n", std::string(ring.status().message()).c_str());
    return 3;
  }
  const std::size_t n = static_cast<std::size_t>(mib * (1 << 20) / sizeof(float));
  std::vector<float> data(n, static_cast<float>(options.rank + 1));
  float barrier = 0;
  std::FILE* out = std::fopen(out_path.c_str(), "w");
  if (out == nullptr) return 5;
  std::fprintf(out, "# phub_ring_worker rank=%u world=%u bytes=%zu iters=%d warmup=%d\n",
               options.rank, options.world_size, n * sizeof(float), iters, warmup);
  std::fprintf(out, "iter\tt0_ns\tt1_ns\tseconds\n");
  for (int it = 0; it < warmup + iters; ++it) {
    if (auto s = (*ring)->Allreduce({&barrier, 1}); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 3;
    }
    std::int64_t t0 = NowNs();
    if (auto s = (*ring)->Allreduce(data, phub::ring::ReduceOp::kMean); !s.ok()) {
      std::fprintf(stderr, "%s\n", std::string(s.message()).c_str());
      return 3;
    }
    std::int64_t t1 = NowNs();
    if (it >= warmup) {
      std::fprintf(out, "%d\t%" PRId64 "\t%" PRId64 "\t%.9f\n", it - warmup, t0, t1, (t1 - t0) * 1e-9);
    }
  }
  const float expected = (options.world_size + 1) / 2.0f;
  for (std::size_t i = 0; i < n; i += 4099) {
    if (std::fabs(data[i] - expected) > 1e-4f) {
      std::fprintf(stderr, "element %zu is %g, expected %g\n", i, data[i], expected);
      return 4;
    }
  }
  std::fprintf(out, "checksum\t%016" PRIx64 "\n", Fnv1a64(data));
  return std::fclose(out) == 0 ? 0 : 5;
}
