// The racks and helpers of the elastic-racks tests (elastic_racks_test.cc,
// elastic_racks_lr_test.cc): two racks, r0 of 3 hosts (an elastic part) and r1 of 2 (fixed),
// a real phubd per rack (RackPhubds), workers of either rack in this process (ConnectInRack)
// or in a child (ForkWorker), and the float64 reference of what the homes should step.
#pragma once

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "phub/client/detail/rack_role.h"
#include "phub/server/shard/copy_count.h"
#include "tests/integration/child_worker.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/reference/optimizer_reference.h"
#include "tests/support/free_port.h"

namespace phub::testing {

inline const std::vector<std::uint64_t> kSizes = {300, 17};
inline constexpr float kLr = 0.1f, kMomentum = 0.9f;
inline constexpr std::uint32_t kRacks = 2;
// Rack r0: 3 hosts (an elastic part of 1 to 3 that starts with 2); rack r1: 2 hosts (fixed).
inline constexpr std::uint32_t kHosts[kRacks] = {3, 2};

// Each rack's workers draw their gradients from a seed of their own: ranks repeat across racks.
inline std::uint64_t SeedOf(std::uint32_t rack) { return 11 + 100 * rack; }

inline std::string RacksFile(const std::vector<std::uint16_t>& ports) {
  std::string text;
  std::uint32_t host = 0;
  for (std::uint32_t r = 0; r < kRacks; ++r) {
    text += "rack { name: \"r" + std::to_string(r) +
            "\" pbox: \"127.0.0.1:" + std::to_string(ports[r]) + "\"";
    for (std::uint32_t i = 0; i < kHosts[r]; ++i)
      text += " host: \"w" + std::to_string(host++) + "\"";
    text += " }\n";
  }
  return text;
}

// Rack r0's part is elastic, of 1 to its 3 hosts, starting with `start`; r1's is fixed. Every
// rack's workers give `lr_scaling`.
inline client::PsClientOptions Options(
    std::uint16_t port, std::uint32_t rack, std::uint32_t start,
    kernels::LrScaling lr_scaling = kernels::LrScaling::kFixed) {
  client::PsClientOptions options;
  options.lr_scaling = lr_scaling;
  options.port = port;
  options.connect_timeout_ms = 10000;
  options.optimizer = kernels::OptimizerConfig{
      .kind = kernels::OptimizerKind::kMomentum, .lr = kLr, .momentum = kMomentum};
  if (rack == 0) {
    options.min_workers = 1;
    options.start_workers = start;
  }
  return options;
}

// Rank `rank` of rack `rack`'s part (its world: the rack's hosts); rank 0 of rack 0 holds the
// initial weights TestValue(SeedOf(0), kInitRank, ...).
inline InProcessWorker ConnectInRack(
    std::uint16_t port, std::uint32_t rack, std::uint32_t rank, std::uint32_t start = 2,
    kernels::LrScaling lr_scaling = kernels::LrScaling::kFixed) {
  InProcessWorker w;
  const std::vector<keys::TensorSpec> tensors = TestTensors(kSizes);
  std::vector<std::span<float>> spans;
  for (std::uint32_t t = 0; t < tensors.size(); ++t) {
    w.weights.emplace_back(tensors[t].elements, 0.0f);
    w.grads.emplace_back(tensors[t].elements, 0.0f);
    for (std::uint64_t i = 0; rank == 0 && i < tensors[t].elements; ++i) {
      w.weights[t][i] = TestValue(SeedOf(rack), kInitRank, 0, t, i);
    }
    spans.emplace_back(w.weights[t]);
  }
  auto c = client::detail::ConnectInRacks(Options(port, rack, start, lr_scaling),
                                          {rank, kHosts[rack]},
                                          {.racks = kRacks, .rack = rack}, tensors, spans);
  if (c.ok()) {
    w.client = std::move(*c);
  } else {
    w.status = c.status();
  }
  return w;
}

// Rank `rank` of rack r0 (which starts with `start`) in a child process the test can SIGKILL
// (child_worker.h).
inline ChildWorker ForkWorker(std::uint32_t rank, std::uint32_t start) {
  return ChildWorker::Fork(
      [=](std::uint16_t port) { return ConnectInRack(port, 0, rank, start); }, SeedOf(0));
}

// By iteration, the (rack, rank) whose copies were pushed whole.
using Pushed = std::map<std::uint64_t, std::set<std::pair<std::uint32_t, std::uint32_t>>>;

// Momentum SGD in float64 from rack 0's rank 0's weights, each iteration on the mean of every
// copy pushed in it, whichever rack, with the lr `lr_of(iteration)` (none: kLr throughout).
inline std::vector<std::vector<double>> Reference(
    const Pushed& pushed, std::uint64_t last,
    const std::function<double(std::uint64_t)>& lr_of = nullptr) {
  std::vector<std::vector<double>> weights;
  for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
    std::vector<double> w(kSizes[t]), v, s;
    for (std::uint64_t i = 0; i < kSizes[t]; ++i) w[i] = TestValue(SeedOf(0), kInitRank, 0, t, i);
    RefConfig config{.kind = RefOptimizer::kMomentum, .lr = kLr, .momentum = kMomentum};
    for (std::uint64_t it = 1; it <= last; ++it) {
      if (lr_of) config.lr = lr_of(it);
      std::vector<std::vector<double>> grads;
      for (const auto& [rack, rank] : pushed.at(it)) {
        grads.emplace_back(kSizes[t]);
        for (std::uint64_t i = 0; i < kSizes[t]; ++i) {
          grads.back()[i] = TestValue(SeedOf(rack), rank, it, t, i);
        }
      }
      RefStep(config, grads, w, v, s, it);
    }
    weights.push_back(std::move(w));
  }
  return weights;
}

// Polls `member`'s view until iteration `it` has `world` members (the change was announced).
inline bool AwaitWorld(client::PsClient& member, std::uint64_t it, std::uint32_t world) {
  for (int i = 0; i < 10000; ++i) {
    if (member.MembersOf(it).world == world) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// A phubd per rack of RacksFile on free ports, each given `args` too.
struct RackPhubds {
  RackPhubds(const TempDir& dir, const std::vector<std::string>& args) {
    for (std::uint32_t r = 0; r < kRacks; ++r) ports.push_back(FreeLoopbackPort());
    const std::string file = dir.File("racks.txtpb");
    std::ofstream(file) << RacksFile(ports);
    for (std::uint32_t r = 0; r < kRacks; ++r) {
      std::vector<std::string> argv = {"--topology", file, "--rack",        "r" + std::to_string(r),
                                       "--cores",    "2",  "--chunk-bytes", "256"};
      argv.insert(argv.end(), args.begin(), args.end());
      phubds.push_back(StartPhubdOnPort(dir, ports[r], argv));
    }
  }
  std::string Logs() const {
    std::string text;
    for (const auto& p : phubds) text += "\n" + p.log_path + ":\n" + ReadFile(p.log_path);
    return text;
  }
  std::vector<std::uint16_t> ports;
  std::vector<RunningPhubd> phubds;
};

// A chunk's home phubd (rack r0's, of a topology of r0 with 2 hosts and r1 with 1) driven by
// two forged PBoxes attached as the racks' PBoxes, for the tests that make the sums themselves:
// the homes' job is one tensor, a rack's chunk of kElements and its counts; rack r0's initial
// weights are 1, 2, ..., kElements. Start() attaches both PBoxes (their Hello's lr scaling
// `lr_scaling`); the caller asserts pboxes[0] && pboxes[1].
struct ForgedPboxes {
  static constexpr std::uint32_t kElements = 64;
  static constexpr std::uint32_t kRackWorkers[2] = {2, 1};

  void Start(kernels::LrScaling lr_scaling) {
    const std::vector<std::uint16_t> ports = {FreeLoopbackPort(), FreeLoopbackPort()};
    const std::string file = dir.File("racks.txtpb");
    std::ofstream(file) << "rack { name: \"r0\" pbox: \"127.0.0.1:" << ports[0]
                        << "\" host: \"w0\" host: \"w1\" }\n"
                        << "rack { name: \"r1\" pbox: \"127.0.0.1:" << ports[1]
                        << "\" host: \"w2\" }\n";
    home = StartPhubdOnPort(dir, ports[0], {"--topology", file, "--rack", "r0", "--chunk-bytes",
                                            "256", "--rejoin-timeout-ms", "0"});
    const std::vector<keys::TensorSpec> tensors = {{"t0@0", kElements + server::kCountElements}};
    weights.assign(2, std::vector<float>(kElements + server::kCountElements, 0.0f));
    for (std::uint32_t i = 0; i < kElements; ++i) weights[0][i] = 1.0f + static_cast<float>(i);
    pboxes.resize(2);
    std::vector<std::thread> threads;
    for (std::uint32_t r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        client::PsClientOptions options;
        options.port = ports[0];
        options.connect_timeout_ms = 10000;
        options.lr_scaling = lr_scaling;
        options.optimizer =
            kernels::OptimizerConfig{.kind = kernels::OptimizerKind::kSgd, .lr = 1.0f};
        auto c = client::detail::ConnectInRacks(
            options, {r, 2},
            {.racks = 2, .rack = r, .rack_workers = kRackWorkers[r], .rack_start = 1}, tensors,
            {std::span<float>(weights[r])});
        ASSERT_TRUE(c.ok()) << c.status();
        pboxes[r] = std::move(*c);
        ASSERT_TRUE(pboxes[r]->Init().ok());
      });
    }
    for (auto& t : threads) t.join();
  }

  TempDir dir;
  RunningPhubd home;
  std::vector<std::vector<float>> weights;
  std::vector<std::unique_ptr<client::PsClient>> pboxes;
};

}  // namespace phub::testing
