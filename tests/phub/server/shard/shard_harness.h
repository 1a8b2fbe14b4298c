// A Shard driven by forged workers, for the shard_*_test.cc files: each server core of a small
// job is a real Shard on its own EventLoop, accepting real TCP connections through the
// transport seam (OpenDevice(kTcp) -> Bind -> Listen, whose ready() hands each connection to
// Shard::Adopt, as ServerCore does); the workers are raw sockets in the test
// (tests/support/forged_client.h) that send exactly the bytes a test chooses and read what the
// shard sends back.
//
// The job: world size 3, two cores, 64-byte chunks (16 floats), three tensors: a = 40 floats
// (chunks 0..2: 16, 16, 8), b = 20 (chunks 3..4: 16, 4), c = 1 (chunk 5), placed by
// KeyTable::Build (balanced by bytes): core 0 owns chunks 0 and 3 (full), core 1 owns 1, 2, 4
// and 5 (one full, three short ones).
//
// Every wait is bounded (kStep): a deadline only turns a hang into a failure; nothing measures
// time.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "phub/server/shard/job_spec.h"
#include "phub/server/shard/shard.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/transport.h"
#include "phub/transport/wire_header.h"
#include "tests/reference/optimizer_reference.h"
#include "tests/support/forged_client.h"

namespace phub::server::shard_test {

using phub::testing::Millis;
using phub::testing::RawSocket;
using Tensors = std::vector<std::vector<float>>;

inline constexpr Millis kStep{5000};
inline constexpr std::uint32_t kWorld = 3;
inline constexpr std::uint32_t kCores = 2;
inline constexpr std::uint64_t kChunkBytes = 64;
inline constexpr std::uint64_t kSession = 0x0123'4567'89ab'cdefull;
inline const std::vector<keys::TensorSpec> kModel = {{"a", 40}, {"b", 20}, {"c", 1}};

std::shared_ptr<JobSpec> MakeJob(kernels::OptimizerConfig optimizer = {});
// Every tensor of kModel, uniform in [lo, hi).
Tensors RandomTensors(std::mt19937& rng, float lo, float hi);
std::span<const float> ChunkOf(const Tensors& values, const keys::Chunk& c);

// One server core: a Shard on its own EventLoop, listening on 127.0.0.1 through the seam. Its
// events are recorded for the test's thread; everything else about the shard is read on the
// loop (OnLoop), the only thread that may touch it.
class ShardOnLoop {
 public:
  ShardOnLoop(std::shared_ptr<const JobSpec> job, keys::CoreIndex core);
  ~ShardOnLoop();

  std::uint16_t port() const { return acceptor_->port(); }
  keys::CoreIndex core() const { return core_; }

  // `fn` on the shard's thread; returns once it ran.
  void OnLoop(const std::function<void(Shard&)>& fn);
  ShardStats stats();
  std::size_t unattached();
  // Polls (on the loop) until `done` holds or kStep passes; whether it held.
  bool Eventually(const std::function<bool(Shard&)>& done);
  // Returns once every handler already queued on the loop (a connection's close included) ran.
  void Drain();

  // Every event the shard reported so far, in order.
  std::vector<ShardEvent> events();
  // The first event of `kind` (waiting up to kStep for it), or nullopt.
  std::optional<ShardEvent> AwaitEvent(ShardEvent::Kind kind);

 private:
  void Record(ShardEvent event);

  keys::CoreIndex core_;
  transport::EventLoop loop_;
  std::unique_ptr<transport::Transport> transport_;
  std::unique_ptr<Shard> shard_;
  std::unique_ptr<transport::Acceptor> acceptor_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ShardEvent> events_;  // guarded by mu_
};

std::size_t CountEvents(const std::vector<ShardEvent>& events, ShardEvent::Kind kind);

// ---- The forged workers ----

// A connection to the core that has said nothing yet.
RawSocket Connect(const ShardOnLoop& shard);
// A connection that has sent the ATTACH of `rank` (the job's session, the core's index).
RawSocket Attached(const ShardOnLoop& shard, std::uint32_t rank);
// `op` (PUSH or INIT) of chunk `c` with `values` as its payload.
bool SendChunk(RawSocket& socket, transport::Op op, std::uint32_t rank, const keys::Chunk& c,
               std::uint64_t iteration, std::span<const float> values);
// Reads WEIGHTS of every chunk in `chunks` (any order) for `iteration` addressed to `rank`, and
// returns their values by chunk id; a failure (ADD_FAILURE) names what came instead.
std::map<std::uint32_t, std::vector<float>> ReadWeights(RawSocket& socket, std::uint32_t rank,
                                                        const std::vector<std::uint32_t>& chunks,
                                                        std::uint64_t iteration,
                                                        const keys::KeyTable& table);

// Core 0 of the job (SGD), no worker yet. AttachAll attaches every rank; Run also has rank 0
// send INIT of every chunk and every worker read WEIGHTS(k, 0), so that every chunk expects
// PUSH of iteration 1.
class ShardTest : public ::testing::Test {
 protected:
  ShardTest();

  void AttachAll();
  void Run();
  // Every worker pushes every chunk of core 0 for `iteration` and reads the WEIGHTS.
  void Iterate(std::uint64_t iteration);

  std::shared_ptr<JobSpec> job_;
  const keys::KeyTable& table_;
  ShardOnLoop shard_;
  const std::vector<std::uint32_t>& mine_;  // chunks of core 0
  Tensors initial_;                         // rank 0's INIT (and the gradients of Iterate)
  std::vector<RawSocket> workers_;          // by rank, to core 0
};

// The float64 reference optimizer configured as phubd's (tests/reference/optimizer_reference.h).
inline testing::RefConfig ReferenceConfig(const kernels::OptimizerConfig& c) {
  testing::RefConfig r;
  switch (c.kind) {
    case kernels::OptimizerKind::kSgd:
      r.kind = testing::RefOptimizer::kSgd;
      break;
    case kernels::OptimizerKind::kMomentum:
      r.kind = testing::RefOptimizer::kMomentum;
      break;
    case kernels::OptimizerKind::kNesterov:
      r.kind = testing::RefOptimizer::kNesterov;
      break;
    case kernels::OptimizerKind::kAdam:
      r.kind = testing::RefOptimizer::kAdam;
      break;
    case kernels::OptimizerKind::kAverage:  // summation mode has its own tests (kernels_test)
      ADD_FAILURE() << "the float64 optimizer reference has no summation mode";
      break;
  }
  r.lr = c.lr;
  r.momentum = c.momentum;
  r.weight_decay = c.weight_decay;
  r.beta1 = c.beta1;
  r.beta2 = c.beta2;
  r.eps = c.eps;
  return r;
}

}  // namespace phub::server::shard_test
