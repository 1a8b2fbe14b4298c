// phub_demo_worker: a worker that moves a real model's gradients through phubd, the way
// training will: every iteration pushes each tensor in backward order (last layer first) as
// soon as it is "produced", then waits for all fresh weights. Prints one summary row.
//
// This is the demo's stand-in for phub-worker until the compute engine lands: the exchange is
// real (PsClient, phubd, aggregation, optimizer), the gradients are synthetic.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>

#include "bench/models/model_tables.h"
#include "phub/client/ps_client.h"
#include "phub/common/logging.h"

int main(int argc, char** argv) {
  phub::client::PsClientOptions options;
  std::string model = "resnet50", log_level = "warn";
  int iterations = 20, warmup = 2;
  CLI::App app{"PHub demo worker: pushes a model's gradients through phubd"};
  app.add_option("--host", options.host, "phubd's address")->capture_default_str();
  app.add_option("--port", options.port, "phubd's control port")->required();
  app.add_option("--rank", options.rank, "This worker's rank")->required();
  app.add_option("--world", options.world_size, "Number of workers")->required();
  app.add_option("--model", model, "Tensor table to use (resnet50)")->capture_default_str();
  app.add_option("--iters", iterations, "Measured iterations")->capture_default_str();
  app.add_option("--warmup", warmup, "Unmeasured iterations first")->capture_default_str();
  app.add_option("--log-level", log_level)->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  (void)phub::SetUpLogging(log_level, "worker " + std::to_string(options.rank));

  auto fail = [&](const phub::Status& s) {
    spdlog::error("{}", s.message());
    return 1;
  };
  auto tensors = phub::bench::ModelTensors(model);
  if (!tensors.ok()) return fail(tensors.status());
  std::vector<std::vector<float>> weights, grads;
  std::vector<std::span<float>> spans;
  std::uint64_t total = 0;
  for (const auto& t : *tensors) {
    weights.emplace_back(t.elements, 0.01f);
    grads.emplace_back(t.elements, 0.001f * static_cast<float>(options.rank + 1));
    total += t.elements;
  }
  for (auto& w : weights) spans.emplace_back(w);

  auto client = phub::client::PsClient::Connect(options, *tensors, spans);
  if (!client.ok()) return fail(client.status());
  if (auto s = (*client)->Init(); !s.ok()) return fail(s);

  std::vector<double> ms;
  for (int it = 0; it < warmup + iterations; ++it) {
    auto start = std::chrono::steady_clock::now();
    for (std::uint32_t t = static_cast<std::uint32_t>(tensors->size()); t-- > 0;) {
      if (auto s = (*client)->Push(t, grads[t]); !s.ok()) return fail(s);
    }
    if (auto s = (*client)->WaitAll(); !s.ok()) return fail(s);
    double elapsed = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    if (it >= warmup) ms.push_back(elapsed);
  }
  if (auto s = (*client)->Close(); !s.ok()) return fail(s);

  std::sort(ms.begin(), ms.end());
  double median = ms[ms.size() / 2];
  double mib = total * 4.0 / (1 << 20);
  // Every worker must hold the same weights: print a checksum the demo compares.
  double checksum = 0;
  for (auto& w : weights) for (float v : w) checksum += v;
  std::printf("%-5u %-9s %8zu %10.1f %10.1f %10.1f %10.2f %14.6f\n", options.rank, model.c_str(),
              tensors->size(), mib, median, ms.front(), 2.0 * mib / median * 1000.0 / 1024.0,
              checksum);
  return 0;
}
