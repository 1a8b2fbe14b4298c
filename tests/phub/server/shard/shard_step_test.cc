// Shard's aggregation fused with the optimizer step, end to end through real connections
// (shard_harness.h): the WEIGHTS every worker gets after each iteration equal an independent
// float64 reference (tests/reference/optimizer_reference.h) of the mean gradient and the step,
// for every optimizer, on both cores of the job; stats() counts exactly what moved.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "phub/server/shard/shard.h"
#include "tests/phub/server/shard/shard_harness.h"
#include "tests/reference/optimizer_reference.h"

namespace phub::server::shard_test {
namespace {

using transport::Op;

struct StepCase {
  std::string name;
  kernels::OptimizerConfig config;
};

std::ostream& operator<<(std::ostream& out, const StepCase& c) { return out << c.name; }


kernels::OptimizerConfig Optimizer(kernels::OptimizerKind kind, float lr, float weight_decay) {
  kernels::OptimizerConfig c;
  c.kind = kind;
  c.lr = lr;
  c.weight_decay = weight_decay;
  return c;
}

// Gradients of one worker for one iteration: uniform in [-1, 1]. For Adam, whose step
// m_hat / (sqrt(s_hat) + eps) is ill-conditioned where the mean gradient cancels to ~eps (a
// float sum's rounding then flips the step), every worker's gradient of an element has the
// element's sign (magnitudes in [0.25, 1]): the comparison then tests the shard, not the
// conditioning (tests/phub/kernels/aggregate_and_step_test.cc explains it in full).
Tensors Gradients(std::mt19937& rng, const Tensors& signs, bool adam) {
  Tensors g = RandomTensors(rng, -1.0f, 1.0f);
  if (!adam) return g;
  for (std::size_t t = 0; t < g.size(); ++t) {
    for (std::size_t i = 0; i < g[t].size(); ++i) {
      g[t][i] = std::copysign(0.25f + 0.375f * (g[t][i] + 1.0f), signs[t][i]);
    }
  }
  return g;
}

class ShardStepTest : public ::testing::TestWithParam<StepCase> {};

// Both cores of the job, three workers attached to each. Rank 0's INIT arrives before the
// other workers attach on core 0 (WEIGHTS(0) go out at the last ATTACH) and after on core 1
// (they go out at the INIT). Every worker gets WEIGHTS(k, 0) equal to the INIT byte for byte,
// then for 4 iterations each pushes random gradients of every chunk and gets WEIGHTS(k, t)
// equal to the reference: weights and optimizer state kept in float64 from the same start,
// the mean of the three gradients, the step of the job's optimizer. Tolerance: the shard
// computes in float32, rounding each of a handful of operations per element per iteration at
// 2^-24 relative (~6e-8) on values of order 1, so after 4 iterations the error is a few 1e-7;
// 1e-5 relative with a 1e-6 floor (for values near 0) is far above that and far below what any
// wrong term (lr, 1/N, a skipped worker, a lost state update) moves the weights (>= 1e-3).
// Afterwards stats() counts exactly the aggregations and the bytes in and out.
TEST_P(ShardStepTest, EveryWorkerGetsTheReferenceStepForSeveralIterations) {
  const kernels::OptimizerConfig config = GetParam().config;
  const bool adam = config.kind == kernels::OptimizerKind::kAdam;
  auto job = MakeJob(config);
  const keys::KeyTable& table = job->table;
  std::vector<std::unique_ptr<ShardOnLoop>> cores;
  for (std::uint32_t c = 0; c < kCores; ++c) cores.push_back(std::make_unique<ShardOnLoop>(job, c));

  std::mt19937 rng(20240611 + static_cast<int>(config.kind));
  const Tensors initial = RandomTensors(rng, -1.0f, 1.0f);
  const Tensors signs = RandomTensors(rng, -1.0f, 1.0f);

  // workers[rank][core]
  std::vector<std::vector<RawSocket>> workers(kWorld);
  for (std::uint32_t c = 0; c < kCores; ++c) {
    const std::vector<std::uint32_t>& mine = table.chunks_on_core(c);
    ASSERT_FALSE(mine.empty()) << "core " << c << " owns no chunk: the test needs both";
    auto send_init = [&] {
      for (std::uint32_t k : mine) {
        ASSERT_TRUE(SendChunk(workers[0][c], Op::kInit, 0, table.chunks()[k], 0,
                              ChunkOf(initial, table.chunks()[k])));
      }
    };
    workers[0].push_back(Attached(*cores[c], 0));
    if (c == 0) {  // INIT in before anyone else attaches
      ASSERT_NO_FATAL_FAILURE(send_init());
      ASSERT_TRUE(cores[c]->Eventually(
          [&](Shard& s) { return s.stats().bytes_in == table.bytes_on_core(c); }));
    }
    for (std::uint32_t r = 1; r < kWorld; ++r) workers[r].push_back(Attached(*cores[c], r));
    if (c == 1) {  // INIT once everyone has attached
      ASSERT_TRUE(cores[c]->AwaitEvent(ShardEvent::Kind::kAllAttached));
      ASSERT_NO_FATAL_FAILURE(send_init());
    }
  }
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    for (std::uint32_t c = 0; c < kCores; ++c) {
      auto got = ReadWeights(workers[r][c], r, table.chunks_on_core(c), 0, table);
      for (const auto& [k, values] : got) {
        const auto want = ChunkOf(initial, table.chunks()[k]);
        EXPECT_TRUE(std::equal(values.begin(), values.end(), want.begin(), want.end()))
            << "rank " << r << ": WEIGHTS(" << k << ", 0) are not the INIT";
      }
    }
  }

  // The reference, per tensor, in float64.
  const testing::RefConfig ref_config = ReferenceConfig(config);
  std::vector<std::vector<double>> ref_w, ref_v(kModel.size()), ref_s(kModel.size());
  for (const auto& t : initial) ref_w.emplace_back(t.begin(), t.end());

  constexpr std::uint64_t kIterations = 4;
  for (std::uint64_t it = 1; it <= kIterations; ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    std::vector<Tensors> grads;
    for (std::uint32_t r = 0; r < kWorld; ++r) grads.push_back(Gradients(rng, signs, adam));
    // Every worker pushes every chunk to its owner, ranks interleaved.
    for (const keys::Chunk& k : table.chunks()) {
      for (std::uint32_t r = 0; r < kWorld; ++r) {
        ASSERT_TRUE(
            SendChunk(workers[r][table.owner(k.id)], Op::kPush, r, k, it, ChunkOf(grads[r], k)));
      }
    }
    for (std::size_t t = 0; t < kModel.size(); ++t) {
      std::vector<std::vector<double>> g;
      for (std::uint32_t r = 0; r < kWorld; ++r)
        g.emplace_back(grads[r][t].begin(), grads[r][t].end());
      testing::RefStep(ref_config, g, ref_w[t], ref_v[t], ref_s[t], it);
    }
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      for (std::uint32_t c = 0; c < kCores; ++c) {
        auto got = ReadWeights(workers[r][c], r, table.chunks_on_core(c), it, table);
        for (const auto& [k, values] : got) {
          const keys::Chunk& chunk = table.chunks()[k];
          int reported = 0;
          for (std::uint32_t i = 0; i < chunk.elements && reported < 3; ++i) {
            const double want = ref_w[chunk.tensor][chunk.offset + i];
            const double err = std::abs(static_cast<double>(values[i]) - want);
            if (!(err <= 1e-6 + 1e-5 * std::abs(want))) {
              ++reported;
              ADD_FAILURE() << "rank " << r << ": chunk " << k << " (tensor "
                            << kModel[chunk.tensor].name << "[" << chunk.offset + i << "]): got "
                            << values[i] << ", reference " << want;
            }
          }
        }
      }
    }
  }

  for (std::uint32_t c = 0; c < kCores; ++c) {
    const std::uint64_t chunks = table.chunks_on_core(c).size();
    const std::uint64_t bytes = table.bytes_on_core(c);
    // A WEIGHTS send is counted when it completes, which may be just after the worker read it.
    EXPECT_TRUE(cores[c]->Eventually([&](Shard& s) {
      return s.stats().bytes_out == kWorld * (kIterations + 1) * bytes;
    })) << "core "
        << c << " sent " << cores[c]->stats().bytes_out << " bytes of weights";
    const ShardStats stats = cores[c]->stats();
    EXPECT_EQ(stats.aggregations, chunks * kIterations) << "core " << c;
    EXPECT_EQ(stats.bytes_in, bytes + kWorld * kIterations * bytes) << "core " << c;
    const auto events = cores[c]->events();
    EXPECT_EQ(CountEvents(events, ShardEvent::Kind::kAllAttached), 1u) << "core " << c;
    EXPECT_EQ(events.size(), 1u) << "core " << c << ": more than kAllAttached reported";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, ShardStepTest,
    ::testing::Values(
        StepCase{"Sgd", Optimizer(kernels::OptimizerKind::kSgd, 0.1f, 0.0f)},
        StepCase{"SgdWithWeightDecay", Optimizer(kernels::OptimizerKind::kSgd, 0.1f, 0.01f)},
        StepCase{"Momentum", Optimizer(kernels::OptimizerKind::kMomentum, 0.1f, 0.01f)},
        StepCase{"Nesterov", Optimizer(kernels::OptimizerKind::kNesterov, 0.1f, 0.0f)},
        StepCase{"Adam", Optimizer(kernels::OptimizerKind::kAdam, 0.01f, 0.01f)}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace phub::server::shard_test
