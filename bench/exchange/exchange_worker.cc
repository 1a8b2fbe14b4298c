// phub_exchange_worker: one worker of the `exchange` benchmark (run_exchange.py drives it),
// through one phubd (--host/--port) or one phubd per host with the model spread over them
// (--servers HOST:PORT,..., the colocated PS).
//
// Model: tensor 0 "barrier" (1 float) and tensor 1 "data" (--mib MiB of float32). Each
// iteration:
//   Push(barrier); Wait(barrier)    completes only once every worker pushed it: aligns starts
//   t0 = steady_clock
//   Push(data);    Wait(data)       the measured push + pull of S bytes
//   t1 = steady_clock
// steady_clock is CLOCK_MONOTONIC on Linux, one clock for all processes on the machine, so the
// driver may also compare t0/t1 across workers.
//
// Values: rank 0 starts the weights at w0[i] = 1 + (i % 8) / 8; worker r pushes the constant
// gradient g_r = 0.01 * (r + 1). With SGD (phubd --optimizer sgd --lr LR) every step moves all
// weights by -LR * mean_r(g_r). After the run the worker checks a few weights against that
// (when --lr is given) and writes an FNV-1a checksum of all its weights: every worker must hold
// the same bytes, which the driver compares.
//
// Output (--out, TSV):
//   # phub_exchange_worker rank=R world=N bytes=B iters=I warmup=W
//   iter  t0_ns  t1_ns  seconds          one line per timed iteration (warm-up not written)
//   checksum  <16 hex digits>
// Exit codes: 0 done; 2 bad flags; 3 a PsClient call failed; 4 wrong weights; 5 cannot write.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "phub/client/io_threads_flag.h"
#include "phub/client/wire_flags.h"
#include "phub/exchange/ps_exchange.h"
#include "phub/transport/transport_flags.h"
#include "phub/common/logging.h"

namespace {

constexpr std::uint32_t kBarrier = 0;
constexpr std::uint32_t kData = 1;

std::int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// FNV-1a over 64-bit words (not bytes: 8x faster on 100 MiB, and as good for "same bytes?").
std::uint64_t Fnv1a64(std::span<const float> values, std::uint64_t hash) {
  const auto bytes = std::as_bytes(values);
  std::size_t i = 0;
  for (; i + 8 <= bytes.size(); i += 8) {
    std::uint64_t word;
    std::memcpy(&word, bytes.data() + i, 8);
    hash = (hash ^ word) * 0x100000001b3ULL;
  }
  for (; i < bytes.size(); ++i) {
    hash = (hash ^ static_cast<std::uint8_t>(bytes[i])) * 0x100000001b3ULL;
  }
  return hash;
}

float InitialWeight(std::uint64_t i) { return 1.0f + static_cast<float>(i % 8) / 8.0f; }
float Gradient(std::uint32_t rank) { return 0.01f * static_cast<float>(rank + 1); }

}  // namespace

int main(int argc, char** argv) {
  phub::exchange::PsExchangeOptions exchange_options;
  phub::client::PsClientOptions& options = exchange_options.client;
  std::string servers_csv;
  double mib = 4;
  std::uint32_t iters = 10, warmup = 2, streams = 1;
  double lr = 0;
  std::string out_path, token;
  CLI::App app{"PHub exchange benchmark worker: timed push+pull of one tensor through phubd"};
  app.add_option("--host", options.host, "phubd's control address")->capture_default_str();
  app.add_option("--port", options.port, "phubd's control port");
  app.add_option("--servers", servers_csv,
                 "HOST:PORT,... of every phubd when the PS is spread over several (colocated)");
  app.add_option("--partition-bytes", exchange_options.partition_bytes,
                 "With several servers: granularity of the split")
      ->capture_default_str();
  std::uint32_t rank = 0, world = 1;  // the job's: what the gradients and the check use
  auto* rank_flag = app.add_option("--rank", rank, "This worker's rank");
  auto* world_flag = app.add_option("--world", world, "Number of workers");
  std::string topology_file, hostname = phub::topology::ThisHostName();
  app.add_option("--topology", topology_file,
                 "Racks of racks: the racks file; this worker's rank, world and phubd (its "
                 "rack's PBox) come from it");
  app.add_option("--hostname", hostname, "This worker's host as --topology names it");
  app.add_option("--mib", mib, "Data tensor size S in MiB (rounded down to whole floats)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "Timed iterations")->capture_default_str();
  app.add_option("--warmup", warmup, "Untimed iterations first")->capture_default_str();
  app.add_option("--lr", lr, "phubd's SGD learning rate; > 0 turns on the weight check")
      ->capture_default_str();
  app.add_option("--token", token, "Job token (phubd's --token-file contents)");
  app.add_option("--job", options.job, "The job's name on a shared phubd (bench/tenants)");
  app.add_option("--streams", streams,
                 "Split the data into this many tensors, each pushed again as soon as its "
                 "weights are in (pushes and pulls overlap; bench/tenants); 1: one tensor, "
                 "push then wait")
      ->capture_default_str();
  bool nagle = false;
  app.add_flag("--tcp-nagle", nagle,
               "Leave Nagle's algorithm on (no TCP_NODELAY), as phubd's flag");
  app.add_option("--socket-buffer-bytes", options.socket_buffer_bytes,
                 "Fixed SO_SNDBUF/SO_RCVBUF; 0 = Linux autotuning")
      ->capture_default_str();
  phub::transport::AddSendWindowFlag(app, options.send_window_bytes);
  phub::client::AddIoThreadsFlag(app, options.io_threads);
  phub::client::AddWireFlags(app, options.wire);
  app.add_option("--out", out_path, "Per-iteration times and the weight checksum (TSV)")
      ->required();
  CLI11_PARSE(app, argc, argv);
  options.job_token = token;
  if (topology_file.empty() && (rank_flag->count() == 0 || world_flag->count() == 0)) {
    std::fprintf(stderr, "exchange worker: give --rank and --world, or --topology\n");
    return 2;
  }
  phub::exchange::PsSeat seat{{rank, world}, {}};
  if (!topology_file.empty()) {
    auto topology = phub::topology::Topology::Load(topology_file);
    auto placement = topology.ok() ? topology->Locate(hostname) : topology.status();
    if (!placement.ok()) {
      std::fprintf(stderr, "exchange worker: %s\n", std::string(placement.status().message()).c_str());
      return 2;
    }
    rank = placement->rank;
    world = placement->world_size;
    seat = phub::exchange::JoinRackPbox(*placement, exchange_options);
  }
  options.tcp_no_delay = !nagle;
  (void)phub::SetUpLogging("warn", "exchange worker " + std::to_string(rank));

  const std::uint64_t elements = static_cast<std::uint64_t>(mib * 1024 * 1024) / sizeof(float);
  if (elements == 0) {
    std::fprintf(stderr, "exchange worker: --mib %g is less than one float\n", mib);
    return 2;
  }
  // --streams K: the data in K tensors that move on independently (below).
  if (streams == 0 || streams > elements) {
    std::fprintf(stderr, "exchange worker: --streams %u must be 1 .. the tensor's floats\n",
                 streams);
    return 2;
  }
  std::vector<phub::keys::TensorSpec> tensors = {{"barrier", 1}};
  std::vector<std::pair<std::uint64_t, std::uint64_t>> pieces;  // (offset, elements) per stream
  for (std::uint32_t k = 0; k < streams; ++k) {
    const std::uint64_t begin = elements * k / streams, end = elements * (k + 1) / streams;
    pieces.emplace_back(begin, end - begin);
    tensors.push_back({streams == 1 ? std::string("data") : "data" + std::to_string(k),
                       end - begin});
  }
  // Only rank 0's initial weights matter; the others start from NaN so a missing Init shows.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> barrier_w(1, rank == 0 ? 1.0f : nan);
  std::vector<float> data_w(elements);
  for (std::uint64_t i = 0; i < elements; ++i) {
    data_w[i] = rank == 0 ? InitialWeight(i) : nan;
  }
  const std::vector<float> barrier_g(1, Gradient(rank));
  const std::vector<float> data_g(elements, Gradient(rank));

  auto fail = [&](const char* what, const phub::Status& s) {
    std::fprintf(stderr, "exchange worker %u: %s: %s\n", rank, what,
                 std::string(s.message()).c_str());
    return 3;
  };
  if (servers_csv.empty() && exchange_options.servers.empty()) {
    if (options.port == 0) {
      std::fprintf(stderr, "exchange worker: give --port (one phubd) or --servers\n");
      return 2;
    }
    servers_csv = options.host + ":" + std::to_string(options.port);
  }
  for (const auto& text : absl::StrSplit(servers_csv, ',', absl::SkipEmpty())) {
    auto endpoint = phub::exchange::ParseEndpoint(std::string(text));
    if (!endpoint.ok()) return fail("--servers", endpoint.status());
    exchange_options.servers.push_back(*endpoint);
  }
  std::vector<std::span<float>> weight_spans = {barrier_w};
  std::vector<std::span<const float>> grad_spans = {barrier_g};
  for (const auto& [offset, count] : pieces) {
    weight_spans.push_back(std::span<float>(data_w).subspan(offset, count));
    grad_spans.push_back(std::span<const float>(data_g).subspan(offset, count));
  }
  auto client = phub::exchange::PsExchange::Connect(exchange_options, seat, tensors, weight_spans);
  if (!client.ok()) return fail("Connect", client.status());
  phub::exchange::PsExchange& ps = **client;
  // The gradients go out from these buffers every iteration: on verbs, registered once.
  if (auto s = ps.DeclareGradients(grad_spans); !s.ok()) return fail("DeclareGradients", s);
  if (auto s = ps.Init(); !s.ok()) return fail("Init", s);

  struct Sample {
    std::int64_t t0, t1;
  };
  std::vector<Sample> samples;
  samples.reserve(iters);
  if (streams == 1) {
    for (std::uint32_t it = 0; it < warmup + iters; ++it) {
      if (auto s = ps.Push(kBarrier, barrier_g); !s.ok()) return fail("Push(barrier)", s);
      if (auto s = ps.Wait(kBarrier); !s.ok()) return fail("Wait(barrier)", s);
      const std::int64_t t0 = NowNs();
      if (auto s = ps.Push(kData, data_g); !s.ok()) return fail("Push(data)", s);
      if (auto s = ps.Wait(kData); !s.ok()) return fail("Wait(data)", s);
      const std::int64_t t1 = NowNs();
      if (it >= warmup) samples.push_back({t0, t1});
    }
  } else {
    // Streams: each piece is pushed again as soon as its weights of the last push are in, so
    // the pieces' pushes and pulls overlap and the job always has bytes on its way both ways
    // (a job whose layers overlap perfectly; bench/tenants). One barrier first, then one
    // "iteration" is one round over the pieces: the time from the round's first Wait to its
    // last Push.
    if (auto s = ps.Push(kBarrier, barrier_g); !s.ok()) return fail("Push(barrier)", s);
    if (auto s = ps.Wait(kBarrier); !s.ok()) return fail("Wait(barrier)", s);
    for (std::uint32_t k = 0; k < streams; ++k) {
      if (auto s = ps.Push(kData + k, grad_spans[kData + k]); !s.ok()) return fail("Push", s);
    }
    for (std::uint32_t it = 1; it <= warmup + iters; ++it) {
      const std::int64_t t0 = NowNs();
      for (std::uint32_t k = 0; k < streams; ++k) {
        if (auto s = ps.Wait(kData + k); !s.ok()) return fail("Wait(data)", s);
        if (it == warmup + iters) continue;  // the last round only collects
        if (auto s = ps.Push(kData + k, grad_spans[kData + k]); !s.ok()) return fail("Push", s);
      }
      const std::int64_t t1 = NowNs();
      if (it > warmup) samples.push_back({t0, t1});
    }
  }
  if (auto s = ps.Close(); !s.ok()) return fail("Close", s);

  // Every data step moved every weight by -lr * mean gradient. Check a few positions (they
  // cover all 8 initial values) in double; float rounding stays far below the tolerance.
  const std::uint64_t steps = warmup + iters;
  // With a compact --wire the gradients travel rounded: with error feedback what rounding drops
  // follows in the next push (so the sum is the exact one, less one rounding's worth still in
  // the residual), without it every push loses it. Compact weights trail phubd's by one
  // rounding of one step's change. Both: a few ulps of the format of lr * gradient.
  const bool compact = options.wire.compact();
  const auto on_wire = [&](float g) -> double {
    if (!compact || options.wire.error_feedback) return g;
    return options.wire.format == phub::kernels::WireFormat::kBf16
               ? phub::kernels::ToFloat(phub::kernels::ToBf16(g))
               : phub::kernels::ToFloat(phub::kernels::ToFp16(g));
  };
  double mean_g = 0, max_g = 0;
  for (std::uint32_t r = 0; r < world; ++r) {
    mean_g += on_wire(Gradient(r));
    max_g = std::max(max_g, std::abs(static_cast<double>(Gradient(r))));
  }
  mean_g /= world;
  const double rounding = compact ? 4 * lr * max_g * 0x1p-7 : 0.0;
  for (std::uint64_t i :
       {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2}, std::uint64_t{3}, std::uint64_t{4},
        std::uint64_t{5}, std::uint64_t{6}, std::uint64_t{7}, elements / 2, elements - 1}) {
    if (i >= elements) continue;
    const double got = data_w[i];
    const double want = InitialWeight(i) - lr * static_cast<double>(steps) * mean_g;
    const double tolerance =
        1e-6 * static_cast<double>(steps) + 1e-3 * std::abs(want - InitialWeight(i)) + rounding;
    if (!std::isfinite(got) || (lr > 0 && std::abs(got - want) > tolerance)) {
      std::fprintf(stderr,
                   "exchange worker %u: weight %" PRIu64 " is %.9g after %" PRIu64
                   " steps, expected %.9g (lr %g, mean gradient %g)\n",
                   rank, i, got, steps, want, lr, mean_g);
      return 4;
    }
  }

  std::ofstream out(out_path);
  out << "# phub_exchange_worker rank=" << rank << " world=" << world
      << " bytes=" << elements * sizeof(float) << " iters=" << iters << " warmup=" << warmup
      << "\n";
  out << "iter\tt0_ns\tt1_ns\tseconds\n";
  for (std::size_t i = 0; i < samples.size(); ++i) {
    char line[128];
    std::snprintf(line, sizeof line, "%zu\t%" PRId64 "\t%" PRId64 "\t%.9f\n", i, samples[i].t0,
                  samples[i].t1, static_cast<double>(samples[i].t1 - samples[i].t0) * 1e-9);
    out << line;
  }
  char checksum[32];
  std::snprintf(checksum, sizeof checksum, "%016" PRIx64,
                Fnv1a64(data_w, Fnv1a64(barrier_w, 0xcbf29ce484222325ULL)));
  out << "checksum\t" << checksum << "\n";
  out.close();
  if (!out) {
    std::fprintf(stderr, "exchange worker %u: cannot write %s\n", rank, out_path.c_str());
    return 5;
  }
  return 0;
}
