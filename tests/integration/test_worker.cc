// phub_test_worker: a real worker process for the integration tests. It connects to phubd
// with PsClient, starts from rank 0's deterministic weights, pushes K iterations of
// deterministic gradients (tests/integration/test_data.h) and writes its final weights, as raw
// float32 in table order, to --out. The test recomputes everything in float64 and compares.
//
// Exit codes: 0 done; 2 bad flags; 3 a PsClient call failed (message on stderr).
// --die-at K: in iteration K, push half of the tensors and then SIGKILL itself (a dying worker).
#include <CLI/CLI.hpp>
#include <csignal>
#include <fstream>

#include "phub/client/ps_client.h"
#include "phub/common/logging.h"
#include "tests/integration/test_data.h"

using phub::testing::TestValue;

int main(int argc, char** argv) {
  phub::client::PsClientOptions options;
  std::string sizes_csv, out_path, token;
  std::uint64_t iterations = 3, seed = 1;
  std::int64_t die_at = -1;
  CLI::App app{"PHub integration-test worker"};
  app.add_option("--host", options.host);
  app.add_option("--port", options.port)->required();
  app.add_option("--rank", options.rank)->required();
  app.add_option("--world", options.world_size)->required();
  app.add_option("--tensors", sizes_csv, "comma-separated tensor sizes (floats)")->required();
  app.add_option("--iters", iterations);
  app.add_option("--seed", seed);
  app.add_option("--token", token);
  app.add_option("--out", out_path);
  app.add_option("--die-at", die_at);
  CLI11_PARSE(app, argc, argv);
  options.job_token = token;
  (void)phub::SetUpLogging("warn", "worker " + std::to_string(options.rank));

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

  auto fail = [&](const phub::Status& s) {
    std::fprintf(stderr, "worker %u: %s\n", options.rank, std::string(s.message()).c_str());
    return 3;
  };
  auto client = phub::client::PsClient::Connect(options, tensors, spans);
  if (!client.ok()) return fail(client.status());
  if (auto s = (*client)->Init(); !s.ok()) return fail(s);

  for (std::uint64_t it = 1; it <= iterations; ++it) {
    // Last tensor first, as backward produces them.
    for (std::uint32_t t = static_cast<std::uint32_t>(sizes.size()); t-- > 0;) {
      if (static_cast<std::int64_t>(it) == die_at && t < sizes.size() / 2) {
        std::fflush(stderr);
        std::raise(SIGKILL);
      }
      for (std::uint64_t i = 0; i < sizes[t]; ++i) grads[t][i] = TestValue(seed, options.rank, it, t, i);
      if (auto s = (*client)->Push(t, grads[t]); !s.ok()) return fail(s);
    }
    if (auto s = (*client)->WaitAll(); !s.ok()) return fail(s);
  }
  if (auto s = (*client)->Close(); !s.ok()) return fail(s);

  if (!out_path.empty()) {
    std::ofstream out(out_path, std::ios::binary);
    for (auto& w : weights) out.write(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(float));
    if (!out) return fail(absl::InternalError("cannot write " + out_path));
  }
  return 0;
}
