// A schedule on the shard (JobSpec::per_iteration_values, docs/design.md "Hyper-parameters per
// iteration"): a chunk whose copies are all in waits for its iteration's values (it reports
// kAwaitingValues and sends nothing), steps with them once StepWith brings them, and an
// iteration whose values came first steps as soon as its copies are in. The weights every
// worker gets equal the float64 reference stepped with each iteration's values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "phub/server/shard/shard.h"
#include "tests/phub/server/shard/shard_harness.h"
#include "tests/reference/optimizer_reference.h"

namespace phub::server::shard_test {
namespace {

using transport::Op;

// Every worker of the job attached to core 0's `shard`, rank 0's INIT of `initial` in, and the
// iteration-0 WEIGHTS read by everyone: every chunk expects iteration 1.
std::vector<RawSocket> StartOnCore0(ShardOnLoop& shard, const keys::KeyTable& table,
                                    const Tensors& initial) {
  const std::vector<std::uint32_t>& mine = table.chunks_on_core(0);
  std::vector<RawSocket> workers;
  for (std::uint32_t r = 0; r < kWorld; ++r) workers.push_back(Attached(shard, r));
  EXPECT_TRUE(shard.AwaitEvent(ShardEvent::Kind::kAllAttached));
  for (std::uint32_t k : mine) {
    EXPECT_TRUE(SendChunk(workers[0], Op::kInit, 0, table.chunks()[k], 0,
                          ChunkOf(initial, table.chunks()[k])));
  }
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    EXPECT_EQ(ReadWeights(workers[r], r, mine, 0, table).size(), mine.size());
  }
  return workers;
}

// Three workers on core 0 of a momentum job with a schedule, for 6 iterations whose lr, momentum
// and weight decay all change (lr 0 included, as a warm-up's first step may have). Iterations 1,
// 3 and 5 get their values after every push is in: the chunks wait (kAwaitingValues once per
// iteration, no aggregation) until StepWith; iterations 2, 4 and 6 get them before the pushes.
// Tolerance as in shard_step_test.cc (1e-5 relative, 1e-6 floor): a step taken with another
// iteration's values, or with the job's first values, moves the weights by >= 1e-3.
TEST(ShardStepValuesTest, EachIterationStepsWithItsOwnValuesWhicheverComesFirst) {
  auto job = MakeJob({.kind = kernels::OptimizerKind::kMomentum, .lr = 0.5f, .momentum = 0.5f});
  job->per_iteration_values = true;
  const keys::KeyTable& table = job->table;
  ShardOnLoop shard(job, 0);
  const std::vector<std::uint32_t>& mine = table.chunks_on_core(0);
  std::mt19937 rng(20261128);
  const Tensors initial = RandomTensors(rng, -1.0f, 1.0f);
  std::vector<RawSocket> workers = StartOnCore0(shard, table, initial);
  if (::testing::Test::HasFailure()) return;

  const std::vector<kernels::StepValues> schedule = {
      {.lr = 0.0f, .momentum = 0.9f, .weight_decay = 0.0f},
      {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f},
      {.lr = 0.2f, .momentum = 0.8f, .weight_decay = 0.01f},
      {.lr = 0.15f, .momentum = 0.8f, .weight_decay = 0.0f},
      {.lr = 0.05f, .momentum = 0.7f, .weight_decay = 0.1f},
      {.lr = 0.01f, .momentum = 0.0f, .weight_decay = 0.0f},
  };
  std::vector<std::vector<double>> ref_w, ref_v(kModel.size()), ref_s(kModel.size());
  for (const auto& t : initial) ref_w.emplace_back(t.begin(), t.end());
  std::size_t awaited = 0;
  for (std::uint64_t it = 1; it <= schedule.size(); ++it) {
    SCOPED_TRACE("iteration " + std::to_string(it));
    const kernels::StepValues& values = schedule[it - 1];
    const bool values_first = it % 2 == 0;
    if (values_first) shard.OnLoop([&](Shard& s) { s.StepWith(it, values); });
    std::vector<Tensors> grads;
    for (std::uint32_t r = 0; r < kWorld; ++r) grads.push_back(RandomTensors(rng, -1.0f, 1.0f));
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      for (std::uint32_t k : mine) {
        ASSERT_TRUE(SendChunk(workers[r], Op::kPush, r, table.chunks()[k], it,
                              ChunkOf(grads[r], table.chunks()[k])));
      }
    }
    const std::uint64_t before = (it - 1) * mine.size();
    if (!values_first) {
      // Every copy is in (the bytes were counted) and nothing stepped: the chunks wait.
      const std::uint64_t in = table.bytes_on_core(0) * (1 + kWorld * it);
      ASSERT_TRUE(shard.Eventually([&](Shard& s) { return s.stats().bytes_in == in; }));
      ASSERT_TRUE(shard.Eventually([&](Shard&) {
        return CountEvents(shard.events(), ShardEvent::Kind::kAwaitingValues) == awaited + 1;
      })) << "no kAwaitingValues for an iteration whose values have not come";
      ++awaited;
      EXPECT_EQ(shard.stats().aggregations, before) << "a chunk stepped without its values";
      shard.OnLoop([&](Shard& s) { s.StepWith(it, values); });
    }
    testing::RefConfig ref = ReferenceConfig(kernels::WithValues(job->optimizer, values));
    for (std::size_t t = 0; t < kModel.size(); ++t) {
      std::vector<std::vector<double>> g;
      for (std::uint32_t r = 0; r < kWorld; ++r) g.emplace_back(grads[r][t].begin(), grads[r][t].end());
      testing::RefStep(ref, g, ref_w[t], ref_v[t], ref_s[t], it);
    }
    for (std::uint32_t r = 0; r < kWorld; ++r) {
      for (const auto& [k, got] : ReadWeights(workers[r], r, mine, it, table)) {
        const keys::Chunk& chunk = table.chunks()[k];
        for (std::uint32_t i = 0; i < chunk.elements; ++i) {
          const double want = ref_w[chunk.tensor][chunk.offset + i];
          ASSERT_LE(std::abs(double(got[i]) - want), 1e-6 + 1e-5 * std::abs(want))
              << "rank " << r << " chunk " << k << "[" << i << "]: got " << got[i]
              << ", reference " << want;
        }
      }
    }
  }
  EXPECT_EQ(CountEvents(shard.events(), ShardEvent::Kind::kAwaitingValues), 3u)
      << "one report per iteration that waited, none for those whose values came first";
}

// Without a schedule the job's optimizer steps every iteration at once, and StepWith changes
// nothing (a job of fixed values never waits, whatever a caller posts).
TEST(ShardStepValuesTest, AJobWithFixedValuesNeverWaitsAndIgnoresStepWith) {
  auto job = MakeJob({.kind = kernels::OptimizerKind::kSgd, .lr = 0.5f});
  const keys::KeyTable& table = job->table;
  ShardOnLoop shard(job, 0);
  const std::vector<std::uint32_t>& mine = table.chunks_on_core(0);
  std::mt19937 rng(5);
  const Tensors initial = RandomTensors(rng, -1.0f, 1.0f);
  std::vector<RawSocket> workers = StartOnCore0(shard, table, initial);
  if (::testing::Test::HasFailure()) return;
  shard.OnLoop([](Shard& s) { s.StepWith(1, {.lr = 100.0f}); });
  const Tensors grads = RandomTensors(rng, -1.0f, 1.0f);
  for (std::uint32_t r = 0; r < kWorld; ++r) {
    for (std::uint32_t k : mine) {
      ASSERT_TRUE(SendChunk(workers[r], Op::kPush, r, table.chunks()[k], 1,
                            ChunkOf(grads, table.chunks()[k])));
    }
  }
  for (const auto& [k, got] : ReadWeights(workers[0], 0, mine, 1, table)) {
    const keys::Chunk& chunk = table.chunks()[k];
    for (std::uint32_t i = 0; i < chunk.elements; ++i) {
      const double want = double(initial[chunk.tensor][chunk.offset + i]) -
                          0.5 * double(grads[chunk.tensor][chunk.offset + i]);
      ASSERT_LE(std::abs(double(got[i]) - want), 1e-6 + 1e-5 * std::abs(want));
    }
  }
  EXPECT_EQ(CountEvents(shard.events(), ShardEvent::Kind::kAwaitingValues), 0u);
}

}  // namespace
}  // namespace phub::server::shard_test
