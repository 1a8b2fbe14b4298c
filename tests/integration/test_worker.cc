// phub_test_worker: a real worker process for the integration tests. It joins the job through
// the GradientExchange chosen by --comm (ps: one phubd; ps-colocated: several; ring: ring
// allreduce with the optimizer applied here), starts from rank 0's deterministic weights,
// pushes K iterations of deterministic gradients (tests/integration/test_data.h) and writes
// its final weights, as raw float32 in table order, to --out. The test recomputes everything
// in float64 and compares.
//
// Exit codes: 0 done; 2 bad flags; 3 an exchange call failed (message and status code, e.g.
// "(UNAVAILABLE)", on stderr).
// --die-at K: in iteration K, push half of the tensors and then SIGKILL itself (a dying worker).
//
// Recovery (tests/integration/recovery_test.cc):
// --grad-from-weights: the gradient of element i of tensor t in iteration `it` is
//   TestValue(seed, rank, it, t, i) + 0.25 * weights[t][i], so a worker given the wrong weights
//   on a rejoin or a resume pushes wrong gradients and the final weights differ.
// The worker goes on from the exchange's start_iteration() (a rejoin, or a phubd resumed from a
//   checkpoint): iterations start_iteration()+1 .. --iters.
// --reconnect-ms N: when an exchange call fails with Unavailable (phubd lost or silent, or this
//   worker dropped), the exchange is destroyed and made again (connect timeout N ms), and the
//   worker goes on from its start_iteration(); for at most N ms per loss. Anything else: exit 3.
// --step-delay-ms D: sleeps D ms per iteration, so that a test's kills land mid-run.
// --progress PATH: after each iteration, its number is written to PATH (atomically: a rename).
// --lrs A,B,...: a schedule, one lr per iteration (iteration `it` steps with the it-th):
//   BeginIteration before each iteration's first push, the optimizer flags' other values;
//   with --comm ps the exchange is made for it (per_iteration_values, the optimizer named).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "phub/common/logging.h"
#include "phub/exchange/make_exchange.h"
#include "phub/exchange/transport_flags.h"
#include "phub/kernels/optimizer_flags.h"
#include "tests/integration/test_data.h"

using phub::testing::TestValue;

namespace {

void WriteProgress(const std::string& path, std::uint64_t iteration) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << iteration << "\n";
  }
  std::rename(tmp.c_str(), path.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  phub::exchange::ExchangeOptions options;
  std::string comm = "ps", host = "127.0.0.1", servers_csv, sizes_csv, out_path, token;
  std::string progress_path;
  std::uint16_t port = 0;
  std::uint64_t iterations = 3, seed = 1;
  std::int64_t die_at = -1;
  bool grad_from_weights = false;
  int reconnect_ms = 0, step_delay_ms = 0;
  CLI::App app{"PHub integration-test worker"};
  app.add_option("--comm", comm, "ps, ps-colocated or ring");
  app.add_option("--host", host, "phubd's host (--comm ps)");
  app.add_option("--port", port, "phubd's port (--comm ps)");
  app.add_option("--servers", servers_csv, "HOST:PORT,... of every phubd (instead of --host/--port)");
  app.add_option("--rendezvous", options.ring.ring.rendezvous,
                 "shared directory or tcp://HOST:PORT (--comm ring)");
  std::string topology_file, hostname = phub::topology::ThisHostName();
  app.add_option("--topology", topology_file,
                 "racks of racks: the racks file; rank, world and phubd come from it");
  app.add_option("--hostname", hostname, "this worker's host as --topology names it");
  auto* rank_flag = app.add_option("--rank", options.membership.rank);
  auto* world_flag = app.add_option("--world", options.membership.world_size);
  app.add_option("--tensors", sizes_csv, "comma-separated tensor sizes (floats)")->required();
  app.add_option("--iters", iterations);
  app.add_option("--seed", seed);
  app.add_option("--token", token);
  app.add_option("--job", options.ps.client.job, "the job's name on a shared phubd");
  app.add_option("--out", out_path);
  app.add_option("--die-at", die_at);
  app.add_flag("--grad-from-weights", grad_from_weights,
               "gradient = TestValue + 0.25 * the weights it follows");
  app.add_option("--reconnect-ms", reconnect_ms,
                 "on Unavailable, connect again for up to this long and go on where the PS "
                 "resumes this worker; 0: exit 3");
  app.add_option("--step-delay-ms", step_delay_ms, "sleep this long per iteration");
  app.add_option("--progress", progress_path, "write each completed iteration's number here");
  std::string lrs_csv;
  app.add_option("--lrs", lrs_csv, "a schedule: the lr of each iteration, comma-separated");
  phub::kernels::AddOptimizerFlags(app, options.ring.optimizer);
  phub::exchange::AddTransportFlags(app, options);
  CLI11_PARSE(app, argc, argv);
  if (topology_file.empty() && (rank_flag->count() == 0 || world_flag->count() == 0)) {
    std::fprintf(stderr, "--rank and --world are required (or --topology)\n");
    return 2;
  }
  auto fail = [&](const phub::Status& s) {
    std::fprintf(stderr, "worker %u: %s (%s)\n", options.membership.rank,
                 std::string(s.message()).c_str(),
                 absl::StatusCodeToString(s.code()).c_str());
    return 3;
  };

  auto kind = phub::exchange::ParseExchangeKind(comm);
  if (!kind.ok()) return fail(kind.status());
  options.kind = *kind;
  if (!topology_file.empty()) {
    auto topology = phub::topology::Topology::Load(topology_file);
    if (!topology.ok()) return fail(topology.status());
    if (auto s = phub::exchange::PlaceInRacks(*topology, hostname, options); !s.ok()) {
      return fail(s);
    }
  }
  (void)phub::SetUpLogging("warn", "worker " + std::to_string(options.membership.rank));
  options.ps.client.job_token = token;
  if (reconnect_ms > 0) options.ps.client.connect_timeout_ms = reconnect_ms;
  if (servers_csv.empty() && port != 0 && topology_file.empty()) {
    servers_csv = host + ":" + std::to_string(port);
  }
  for (const auto& text : absl::StrSplit(servers_csv, ',', absl::SkipEmpty())) {
    auto endpoint = phub::exchange::ParseEndpoint(std::string(text));
    if (!endpoint.ok()) return fail(endpoint.status());
    options.ps.servers.push_back(*endpoint);
  }
  // Small partitions so the colocated tests spread even small tensors over every server.
  options.ps.partition_bytes = 4096;
  std::vector<float> lrs;
  for (const auto& text : absl::StrSplit(lrs_csv, ',', absl::SkipEmpty())) {
    float lr = 0;
    if (!absl::SimpleAtof(text, &lr)) {
      std::fprintf(stderr, "--lrs: '%s' is not a number\n", std::string(text).c_str());
      return 2;
    }
    lrs.push_back(lr);
  }
  if (!lrs.empty()) {
    if (lrs.size() != iterations) {
      std::fprintf(stderr, "--lrs gives %zu values for %llu --iters: give one per iteration\n",
                   lrs.size(), static_cast<unsigned long long>(iterations));
      return 2;
    }
    options.ps.client.per_iteration_values = true;
    options.ps.client.optimizer = options.ring.optimizer;
  }

  auto sizes = phub::testing::ParseSizes(sizes_csv);
  std::vector<phub::keys::TensorSpec> tensors;
  std::vector<std::vector<float>> weights(sizes.size()), grads(sizes.size());
  std::vector<std::span<float>> spans;
  // Only rank 0's values matter; others start from NaN to prove the initial weights arrive.
  // Rank 0 starts from them again on a reconnect: a phubd that came back without a checkpoint
  // starts the job over from rank 0's weights.
  auto set_initial_weights = [&] {
    for (std::uint32_t t = 0; t < sizes.size(); ++t) {
      std::fill(weights[t].begin(), weights[t].end(), std::numeric_limits<float>::quiet_NaN());
      for (std::uint64_t i = 0; options.membership.rank == 0 && i < sizes[t]; ++i) {
        weights[t][i] = TestValue(seed, phub::testing::kInitRank, 0, t, i);
      }
    }
  };
  for (std::uint32_t t = 0; t < sizes.size(); ++t) {
    tensors.push_back({"t" + std::to_string(t), sizes[t]});
    weights[t].resize(sizes[t]);  // never resized again: the exchange holds spans of them
    grads[t].resize(sizes[t]);
  }
  set_initial_weights();
  for (auto& w : weights) spans.emplace_back(w);

  // Makes the exchange and Inits it (weights of its start_iteration() in `weights`).
  auto connect = [&]() -> phub::StatusOr<std::unique_ptr<phub::exchange::GradientExchange>> {
    PHUB_ASSIGN_OR_RETURN(auto exchange, phub::exchange::MakeExchange(options, tensors, spans));
    // Declared on even ranks only: on verbs odd ranks push by copy, even ranks zero-copy, and
    // the float64 check covers both paths.
    if (options.membership.rank % 2 == 0) {
      std::vector<std::span<const float>> grad_spans(grads.begin(), grads.end());
      PHUB_RETURN_IF_ERROR(exchange->DeclareGradients(grad_spans));
    }
    PHUB_RETURN_IF_ERROR(exchange->Init());
    return exchange;
  };
  auto exchange = connect();
  if (!exchange.ok()) return fail(exchange.status());
  std::uint64_t done = (*exchange)->start_iteration();

  // An Unavailable `lost` with --reconnect-ms: connect again (for up to reconnect_ms in all)
  // and go on from where the PS resumes this worker. Anything else is returned as it is.
  auto reconnect = [&](const phub::Status& lost) -> phub::Status {
    if (reconnect_ms <= 0 || !absl::IsUnavailable(lost)) return lost;
    std::fprintf(stderr, "worker %u: lost after iteration %llu: %s; reconnecting\n",
                 options.membership.rank,
                 static_cast<unsigned long long>(done), std::string(lost.message()).c_str());
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::milliseconds(reconnect_ms);
    phub::Status last = lost;
    while (std::chrono::steady_clock::now() < deadline) {
      exchange = absl::UnavailableError("reconnecting");  // the old one goes first
      set_initial_weights();
      options.ps.client.deadline = deadline;  // each attempt ends by the overall limit
      exchange = connect();
      options.ps.client.deadline.reset();
      if (exchange.ok()) {
        done = (*exchange)->start_iteration();
        std::fprintf(stderr, "worker %u: reconnected; going on after iteration %llu\n",
                     options.membership.rank, static_cast<unsigned long long>(done));
        return absl::OkStatus();
      }
      last = exchange.status();
      if (!absl::IsUnavailable(last)) return last;
      std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(
          std::chrono::milliseconds(50), deadline - std::chrono::steady_clock::now()));
    }
    return last;
  };

  while (done < iterations) {
    const std::uint64_t it = done + 1;
    if (step_delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms));
    phub::Status status;
    if (!lrs.empty()) {
      phub::kernels::StepValues values = phub::kernels::ValuesOf(options.ring.optimizer);
      values.lr = lrs[it - 1];
      status = (*exchange)->BeginIteration(values);
    }
    // Last tensor first, as backward produces them.
    for (std::uint32_t t = static_cast<std::uint32_t>(sizes.size()); t-- > 0 && status.ok();) {
      if (static_cast<std::int64_t>(it) == die_at && t < sizes.size() / 2) {
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
      for (std::uint64_t i = 0; i < sizes[t]; ++i) {
        grads[t][i] = TestValue(seed, options.membership.rank, it, t, i);
        if (grad_from_weights) grads[t][i] += 0.25f * weights[t][i];
      }
      status = (*exchange)->Push(t, grads[t]);
    }
    if (status.ok()) status = (*exchange)->WaitAll();
    if (!status.ok()) {
      if (auto s = reconnect(status); !s.ok()) return fail(s);
      continue;
    }
    done = it;
    WriteProgress(progress_path, done);
  }
  if (auto s = (*exchange)->Close(); !s.ok()) return fail(s);

  if (!out_path.empty()) {
    std::ofstream out(out_path, std::ios::binary);
    for (auto& w : weights) out.write(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
    if (!out) return fail(absl::InternalError("cannot write " + out_path));
  }
  return 0;
}
