// phub_test_worker: a real worker process for the integration tests. It joins the job through
// the GradientExchange chosen by --comm (ps: one phubd; ps-colocated: several; ring: ring
// allreduce with the optimizer applied here), starts from rank 0's deterministic weights,
// pushes K iterations of deterministic gradients (tests/integration/test_data.h) and writes
// its final weights, as raw float32 in table order, to --out. The test recomputes everything
// in float64 and compares.
//
// Exit codes: 0 done; 2 bad flags; 3 an exchange call failed (message on stderr).
// --die-at K: in iteration K, push half of the tensors and then SIGKILL itself (a dying worker).
#include <CLI/CLI.hpp>
#include <csignal>
#include <fstream>

#include "absl/strings/str_split.h"
#include "phub/common/logging.h"
#include "phub/exchange/make_exchange.h"
#include "phub/exchange/transport_flags.h"
#include "phub/kernels/optimizer_flags.h"
#include "tests/integration/test_data.h"

using phub::testing::TestValue;

int main(int argc, char** argv) {
  phub::exchange::ExchangeOptions options;
  std::string comm = "ps", host = "127.0.0.1", servers_csv, sizes_csv, out_path, token;
  std::uint16_t port = 0;
  std::uint64_t iterations = 3, seed = 1;
  std::int64_t die_at = -1;
  CLI::App app{"PHub integration-test worker"};
  app.add_option("--comm", comm, "ps, ps-colocated or ring");
  app.add_option("--host", host, "phubd's host (--comm ps)");
  app.add_option("--port", port, "phubd's port (--comm ps)");
  app.add_option("--servers", servers_csv, "HOST:PORT,... of every phubd (instead of --host/--port)");
  app.add_option("--rendezvous", options.ring.ring.rendezvous_dir, "shared directory (--comm ring)");
  app.add_option("--rank", options.rank)->required();
  app.add_option("--world", options.world_size)->required();
  app.add_option("--tensors", sizes_csv, "comma-separated tensor sizes (floats)")->required();
  app.add_option("--iters", iterations);
  app.add_option("--seed", seed);
  app.add_option("--token", token);
  app.add_option("--out", out_path);
  app.add_option("--die-at", die_at);
  phub::kernels::AddOptimizerFlags(app, options.ring.optimizer);
  phub::exchange::AddTransportFlags(app, options);
  CLI11_PARSE(app, argc, argv);
  (void)phub::SetUpLogging("warn", "worker " + std::to_string(options.rank));
  auto fail = [&](const phub::Status& s) {
    std::fprintf(stderr, "worker %u: %s\n", options.rank, std::string(s.message()).c_str());
    return 3;
  };

  auto kind = phub::exchange::ParseExchangeKind(comm);
  if (!kind.ok()) return fail(kind.status());
  options.kind = *kind;
  options.ps.client.job_token = token;
  if (servers_csv.empty() && port != 0) servers_csv = host + ":" + std::to_string(port);
  for (const auto& text : absl::StrSplit(servers_csv, ',', absl::SkipEmpty())) {
    auto endpoint = phub::exchange::ParseEndpoint(std::string(text));
    if (!endpoint.ok()) return fail(endpoint.status());
    options.ps.servers.push_back(*endpoint);
  }
  // Small partitions so the colocated tests spread even small tensors over every server.
  options.ps.partition_bytes = 4096;

  auto sizes = phub::testing::ParseSizes(sizes_csv);
  std::vector<phub::keys::TensorSpec> tensors;
  std::vector<std::vector<float>> weights(sizes.size()), grads(sizes.size());
  std::vector<std::span<float>> spans;
  for (std::uint32_t t = 0; t < sizes.size(); ++t) {
    tensors.push_back({"t" + std::to_string(t), sizes[t]});
    // Only rank 0's values matter; others start from NaN to prove the initial weights arrive.
    weights[t].assign(sizes[t], std::numeric_limits<float>::quiet_NaN());
    if (options.rank == 0) {
      for (std::uint64_t i = 0; i < sizes[t]; ++i) {
        weights[t][i] = TestValue(seed, phub::testing::kInitRank, 0, t, i);
      }
    }
    grads[t].resize(sizes[t]);
    spans.emplace_back(weights[t]);
  }

  auto exchange = phub::exchange::MakeExchange(options, tensors, spans);
  if (!exchange.ok()) return fail(exchange.status());
  // Declared on even ranks only: on verbs odd ranks push by copy, even ranks zero-copy, and the
  // float64 check covers both paths.
  if (options.rank % 2 == 0) {
    std::vector<std::span<const float>> grad_spans(grads.begin(), grads.end());
    if (auto s = (*exchange)->DeclareGradients(grad_spans); !s.ok()) return fail(s);
  }
  if (auto s = (*exchange)->Init(); !s.ok()) return fail(s);

  for (std::uint64_t it = 1; it <= iterations; ++it) {
    // Last tensor first, as backward produces them.
    for (std::uint32_t t = static_cast<std::uint32_t>(sizes.size()); t-- > 0;) {
      if (static_cast<std::int64_t>(it) == die_at && t < sizes.size() / 2) {
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
      for (std::uint64_t i = 0; i < sizes[t]; ++i) grads[t][i] = TestValue(seed, options.rank, it, t, i);
      if (auto s = (*exchange)->Push(t, grads[t]); !s.ok()) return fail(s);
    }
    if (auto s = (*exchange)->WaitAll(); !s.ok()) return fail(s);
  }
  if (auto s = (*exchange)->Close(); !s.ok()) return fail(s);

  if (!out_path.empty()) {
    std::ofstream out(out_path, std::ios::binary);
    for (auto& w : weights) out.write(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
    if (!out) return fail(absl::InternalError("cannot write " + out_path));
  }
  return 0;
}
