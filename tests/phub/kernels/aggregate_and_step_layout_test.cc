// AggregateAndStep does not depend on where a chunk is cut: the same tensor aggregated and
// stepped as one chunk, or cut into chunks at other offsets and of other sizes (as another chunk
// size, core count or placement would cut it; starts that are not a multiple of the vector
// width, odd lengths, one-element chunks, chunks longer than the N > 4 path's block), gives the
// same bits in every element of the weights and of every state array, step after step. That is
// what lets two runs of a job give bitwise-identical weights whatever the server layout
// (docs/design.md): each element's arithmetic must not depend on whether it falls in the
// vectorized body of a loop, its peeled prologue or its scalar tail, nor on where a block starts.
//
// N = 1..8 (the register path N <= 4 and the blocked path, with every remainder) and every
// optimizer, with weight decay; three steps so state carries over. A mismatch names the layout,
// the element, the chunk it fell in and its place there, and both values' bits.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::kernels {
namespace {

constexpr std::size_t kLength = 5003;  // > 2 blocks of the N > 4 path (2048 floats), odd
constexpr int kSteps = 3;

struct Cut {
  std::size_t start, length;
};

struct Layout {
  std::string name;
  std::vector<Cut> chunks;  // cover [0, kLength) in order
};

std::vector<Cut> EveryN(std::size_t n) {
  std::vector<Cut> cuts;
  for (std::size_t s = 0; s < kLength; s += n) cuts.push_back({s, std::min(n, kLength - s)});
  return cuts;
}

std::vector<Cut> AtOffsets(const std::vector<std::size_t>& offsets) {
  std::vector<Cut> cuts;
  std::size_t start = 0;
  for (std::size_t o : offsets) {
    cuts.push_back({start, o - start});
    start = o;
  }
  cuts.push_back({start, kLength - start});
  return cuts;
}

std::vector<Cut> RandomCuts(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::size_t> length(1, 700);
  std::vector<Cut> cuts;
  for (std::size_t s = 0; s < kLength;) {
    const std::size_t n = std::min(length(rng), kLength - s);
    cuts.push_back({s, n});
    s += n;
  }
  return cuts;
}

std::vector<Layout> Layouts() {
  return {
      {"64-byte chunks", EveryN(16)},
      {"4 KiB chunks", EveryN(1024)},
      {"8 KiB + 4 bytes chunks", EveryN(2049)},
      {"two, cut at an odd offset", AtOffsets({2501})},
      {"three, cut inside the first and second blocks", AtOffsets({17, 3001})},
      {"one-element chunks first", AtOffsets({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13})},
      {"7-float chunks", EveryN(7)},
      {"random cuts A", RandomCuts(1)},
      {"random cuts B", RandomCuts(2)},
  };
}

OptimizerConfig Config(OptimizerKind kind) {
  OptimizerConfig c;
  c.kind = kind;
  c.lr = kind == OptimizerKind::kAdam ? 0.01f : 0.1f;
  c.weight_decay = 0.01f;
  return c;
}

// One tensor's weights, optimizer state and N inputs, stepped `kSteps` times with `chunks`: each
// chunk is one AggregateAndStep call on the arrays from its start (pointers into one allocation,
// so a start that is not a multiple of 16 floats is not 64-byte aligned).
struct Run {
  std::vector<float> weights;
  std::vector<std::vector<float>> state;
};

Run Step(const OptimizerConfig& config, std::size_t n_inputs, const std::vector<Cut>& chunks,
         std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  Run run;
  run.weights.resize(kLength);
  for (float& w : run.weights) w = unit(rng);
  run.state.assign(StateArrays(config.kind), std::vector<float>(kLength, 0.0f));
  std::vector<std::vector<float>> inputs(n_inputs, std::vector<float>(kLength));
  for (int t = 1; t <= kSteps; ++t) {
    // Magnitudes over 2^±12, so that sums round (the order of the additions shows).
    for (auto& in : inputs) {
      for (float& x : in) x = std::ldexp(unit(rng), exponent(rng));
    }
    for (const Cut& c : chunks) {
      std::vector<const float*> in;
      for (const auto& i : inputs) in.push_back(i.data() + c.start);
      std::vector<float*> state;
      for (auto& s : run.state) state.push_back(s.data() + c.start);
      AggregateAndStep(in, std::span<float>(run.weights.data() + c.start, c.length), state, config,
                       static_cast<std::uint64_t>(t));
    }
  }
  return run;
}

std::string Where(const std::vector<Cut>& chunks, std::size_t i) {
  for (std::size_t k = 0; k < chunks.size(); ++k) {
    if (i >= chunks[k].start && i < chunks[k].start + chunks[k].length) {
      std::ostringstream out;
      out << "chunk " << k << " [" << chunks[k].start << ", +" << chunks[k].length << "), element "
          << i - chunks[k].start << " of it";
      return out.str();
    }
  }
  return "no chunk";
}

std::uint32_t Bits(float x) {
  std::uint32_t b;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// The whole tensor as one chunk against every other layout: identical bits.
void ExpectLayoutIndependent(OptimizerKind kind, std::size_t n_inputs) {
  const OptimizerConfig config = Config(kind);
  const std::uint32_t seed =
      1000 * static_cast<std::uint32_t>(kind) + static_cast<std::uint32_t>(n_inputs);
  const std::vector<Cut> whole = {{0, kLength}};
  const Run base = Step(config, n_inputs, whole, seed);
  for (const Layout& layout : Layouts()) {
    const Run got = Step(config, n_inputs, layout.chunks, seed);
    auto compare = [&](const std::vector<float>& a, const std::vector<float>& b,
                       const std::string& what) {
      int reported = 0;
      for (std::size_t i = 0; i < kLength; ++i) {
        if (Bits(a[i]) == Bits(b[i])) continue;
        if (++reported > 3) break;
        ADD_FAILURE() << OptimizerName(kind) << " N=" << n_inputs << ", layout '" << layout.name
                      << "': " << what << "[" << i << "] (" << Where(layout.chunks, i) << ") is "
                      << a[i] << " (0x" << std::hex << Bits(a[i]) << ") cut, " << b[i] << " (0x"
                      << Bits(b[i]) << std::dec << ") as one chunk (" << Where(whole, i) << ")";
      }
    };
    compare(got.weights, base.weights, "weights");
    for (std::size_t s = 0; s < base.state.size(); ++s) {
      compare(got.state[s], base.state[s], "state " + std::to_string(s));
    }
  }
}

class AggregateAndStepLayoutTest : public ::testing::TestWithParam<OptimizerKind> {};

TEST_P(AggregateAndStepLayoutTest, ChunkCutsDoNotChangeABit) {
  for (std::size_t n = 1; n <= 8; ++n) {
    SCOPED_TRACE("N=" + std::to_string(n));
    ExpectLayoutIndependent(GetParam(), n);
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, AggregateAndStepLayoutTest,
                         ::testing::Values(OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                           OptimizerKind::kNesterov, OptimizerKind::kAdam,
                                           OptimizerKind::kAverage),
                         [](const auto& info) { return OptimizerName(info.param); });

// The premise of the test above: for these inputs, summing in another order than the kernel's
// changes the bits, so the kernel's order is what is being held fixed (a kernel whose grouping
// of the additions depended on the element's place, such as a different association in the
// vector body and the tail, would fail above).
TEST(AggregateAndStepLayoutPremise, AnotherSummationOrderChangesTheBits) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::size_t differs = 0;
  constexpr std::size_t kSamples = 1000;
  for (std::size_t i = 0; i < kSamples; ++i) {
    float x[5];
    for (float& v : x) v = std::ldexp(unit(rng), exponent(rng));
    const float sequential = (((x[0] + x[1]) + x[2]) + x[3]) + x[4];
    const float paired = ((x[0] + x[1]) + (x[2] + x[3])) + x[4];
    differs += Bits(sequential) != Bits(paired) ? 1 : 0;
  }
  EXPECT_GT(differs, kSamples / 10);
}

}  // namespace
}  // namespace phub::kernels
