// Workers as threads of the test process (PsClient in-process), for tests that need to look at
// a worker's Status directly. Connect blocks until the whole job has joined, so several workers
// connect in parallel threads.
#pragma once

#include <memory>
#include <thread>
#include <vector>

#include "phub/client/ps_client.h"
#include "spdlog/spdlog.h"
#include "tests/integration/test_data.h"

namespace phub::testing {

struct InProcessWorker {
  std::vector<std::vector<float>> weights;
  std::vector<std::vector<float>> grads;
  std::unique_ptr<client::PsClient> client;
  Status status;  // of Connect
};

inline std::vector<keys::TensorSpec> TestTensors(const std::vector<std::uint64_t>& sizes) {
  std::vector<keys::TensorSpec> tensors;
  // append, not "t" + ...: GCC 12's -Wrestrict misfires on that once inlined (bug 105329).
  for (std::size_t t = 0; t < sizes.size(); ++t) {
    tensors.push_back({std::string("t").append(std::to_string(t)), sizes[t]});
  }
  return tensors;
}

// Connects ranks[i] of world_size concurrently; worker rank 0 starts from
// TestValue(seed, kInitRank, ...).
inline std::vector<InProcessWorker> ConnectWorkers(const client::PsClientOptions& base,
                                                   std::uint32_t world_size,
                                                   const std::vector<std::uint32_t>& ranks,
                                                   const std::vector<keys::TensorSpec>& tensors,
                                                   std::uint64_t seed = 1) {
  std::vector<InProcessWorker> workers(ranks.size());
  // Create spdlog's registry before the threads race to (TSan cannot see the guard inside the
  // uninstrumented libspdlog, and reports the first-use initialisation as a race).
  spdlog::default_logger_raw();
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    threads.emplace_back([&, k] {
      InProcessWorker& w = workers[k];
      std::vector<std::span<float>> spans;
      for (std::uint32_t t = 0; t < tensors.size(); ++t) {
        w.weights.emplace_back(tensors[t].elements, 0.0f);
        w.grads.emplace_back(tensors[t].elements, 0.0f);
        for (std::uint64_t i = 0; ranks[k] == 0 && i < tensors[t].elements; ++i) {
          w.weights[t][i] = TestValue(seed, kInitRank, 0, t, i);
        }
        spans.emplace_back(w.weights[t]);
      }
      auto c = client::PsClient::Connect(base, {ranks[k], world_size}, tensors, spans);
      if (c.ok()) {
        w.client = std::move(*c);
      } else {
        w.status = c.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  return workers;
}

// One synchronous iteration: fill grads with TestValue(seed, rank, it, ...), push all tensors
// (last first), wait for all.
inline Status RunIteration(InProcessWorker& w, std::uint64_t it, std::uint64_t seed = 1) {
  for (std::uint32_t t = static_cast<std::uint32_t>(w.grads.size()); t-- > 0;) {
    for (std::uint64_t i = 0; i < w.grads[t].size(); ++i) {
      w.grads[t][i] = TestValue(seed, w.client->rank(), it, t, i);
    }
    PHUB_RETURN_IF_ERROR(w.client->Push(t, w.grads[t]));
  }
  return w.client->WaitAll();
}

}  // namespace phub::testing
