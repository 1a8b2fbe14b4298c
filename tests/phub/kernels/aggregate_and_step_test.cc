// AggregateAndStep against an independent float64 reference: a naive per-element loop written
// from the formulas in aggregate_and_step.h, with weights and optimizer state kept in double.
// Random inputs (fixed seeds), every optimizer with and without weight decay, N in {1,2,3,8}
// (plus the other buffered-path shapes), lengths that hit the edges of vector width and block,
// several steps in a row so the state carries over, and pointers that are not 64-byte aligned.
#include "phub/kernels/aggregate_and_step.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace phub::kernels {
namespace {

// ---- The reference: doubles everywhere, one element at a time. ----
struct Reference {
  std::vector<double> w, v, m, s;
};

void ReferenceStep(const std::vector<std::vector<float>>& grads, Reference& r,
                   const OptimizerConfig& c, std::uint64_t t) {
  const double n = static_cast<double>(grads.size());
  const double lr = c.lr, mu = c.momentum, wd = c.weight_decay;
  const double b1 = c.beta1, b2 = c.beta2, eps = c.eps;
  for (std::size_t i = 0; i < r.w.size(); ++i) {
    double sum = 0.0;
    for (const auto& g : grads) sum += g[i];
    const double g = sum / n + wd * r.w[i];
    switch (c.kind) {
      case OptimizerKind::kSgd:
        r.w[i] -= lr * g;
        break;
      case OptimizerKind::kMomentum:
        r.v[i] = mu * r.v[i] + g;
        r.w[i] -= lr * r.v[i];
        break;
      case OptimizerKind::kNesterov:
        r.v[i] = mu * r.v[i] + g;
        r.w[i] -= lr * (g + mu * r.v[i]);
        break;
      case OptimizerKind::kAdam: {
        r.m[i] = b1 * r.m[i] + (1 - b1) * g;
        r.s[i] = b2 * r.s[i] + (1 - b2) * g * g;
        const double m_hat = r.m[i] / (1 - std::pow(b1, static_cast<double>(t)));
        const double s_hat = r.s[i] / (1 - std::pow(b2, static_cast<double>(t)));
        r.w[i] -= lr * m_hat / (std::sqrt(s_hat) + eps);
        break;
      }
      case OptimizerKind::kAverage:  // summation mode: the mean gradient, nothing else
        r.w[i] = sum / n;
        break;
    }
  }
}

std::vector<float> RandomVector(std::mt19937& rng, std::size_t len, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> out(len);
  for (float& x : out) x = dist(rng);
  return out;
}

// N workers' gradients for one step. Uniform in [-1, 1] (so sums cancel) for every optimizer
// but Adam. Adam's step, m_hat / (sqrt(s_hat) + eps), is ill-conditioned in g when |g| is near
// eps: at t=1 it is g / (|g| + eps), so a float sum that cancels to |g| ~ 1e-7 (absolute
// rounding ~6e-8, inherent to summing floats in any order) moves the step by ~1%, which no
// float kernel can avoid. So for Adam all workers agree on each element's sign (magnitudes in
// [0.25, 1], sign random per element and step): the float sum has relative error ~N*2^-24 and
// the comparison tests the kernel, not the conditioning. Tiny gradients (|g| ~ eps) are tested
// with N=1, where g is exact (AdamWithGradientsNearEpsMatchesReference).
std::vector<std::vector<float>> RandomGradients(std::mt19937& rng, std::size_t n_inputs,
                                                std::size_t len, OptimizerKind kind) {
  std::vector<std::vector<float>> grads;
  for (std::size_t k = 0; k < n_inputs; ++k) grads.push_back(RandomVector(rng, len, -1.0f, 1.0f));
  if (kind == OptimizerKind::kAdam) {
    std::bernoulli_distribution negative(0.5);
    for (std::size_t i = 0; i < len; ++i) {
      const float sign = negative(rng) ? -1.0f : 1.0f;
      for (auto& g : grads) g[i] = sign * (0.25f + 0.375f * (g[i] + 1.0f));
    }
  }
  return grads;
}

// |got - want| <= atol + rtol*|want|. The float kernel rounds each of a handful of operations
// (~6e-8 each) on values of order 1, so 1e-5 relative with a small absolute floor (for values
// near 0 after cancellation) is tight enough to catch any wrong term.
void ExpectClose(const std::vector<float>& got, const std::vector<double>& want,
                 const std::string& what, double rtol = 1e-5, double atol = 1e-6) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(static_cast<double>(got[i]) - want[i]);
    if (!(err <= atol + rtol * std::abs(want[i]))) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << " (error "
                    << err << ")";
      if (++reported == 5) return;
    }
  }
}

// Runs `steps` steps of the kernel and of the reference from the same start and compares
// weights and state after each step. `offset` shifts every array by that many floats from the
// start of its allocation, so offset=1 gives pointers that are 4 (mod 64) bytes aligned.
void CheckAgainstReference(OptimizerConfig c, std::size_t n_inputs, std::size_t len, int steps,
                           std::size_t offset, std::uint32_t seed) {
  const std::string what = Describe(c) + " N=" + std::to_string(n_inputs) +
                           " len=" + std::to_string(len) + " offset=" + std::to_string(offset);
  SCOPED_TRACE(what);
  std::mt19937 rng(seed);
  const int n_state = StateArrays(c.kind);

  // Kernel-side storage: one over-sized vector per array; the kernel sees data() + offset.
  std::vector<float> w_store(len + offset);
  std::vector<std::vector<float>> state_store(n_state, std::vector<float>(len + offset, 0.0f));
  std::vector<std::vector<float>> in_store(n_inputs, std::vector<float>(len + offset));
  std::vector<float*> state_ptrs;
  for (auto& s : state_store) state_ptrs.push_back(s.data() + offset);
  std::vector<const float*> in_ptrs;
  for (auto& in : in_store) in_ptrs.push_back(in.data() + offset);

  const std::vector<float> w0 = RandomVector(rng, len, -1.0f, 1.0f);
  std::copy(w0.begin(), w0.end(), w_store.begin() + offset);
  Reference ref;
  ref.w.assign(w0.begin(), w0.end());
  ref.v.assign(len, 0.0);
  ref.m.assign(len, 0.0);
  ref.s.assign(len, 0.0);

  for (int t = 1; t <= steps; ++t) {
    const std::vector<std::vector<float>> grads = RandomGradients(rng, n_inputs, len, c.kind);
    for (std::size_t k = 0; k < n_inputs; ++k) {
      std::copy(grads[k].begin(), grads[k].end(), in_store[k].begin() + offset);
    }
    AggregateAndStep(in_ptrs, std::span<float>(w_store.data() + offset, len), state_ptrs, c,
                     static_cast<std::uint64_t>(t));
    ReferenceStep(grads, ref, c, static_cast<std::uint64_t>(t));

    const std::string at = " after step " + std::to_string(t);
    ExpectClose(std::vector<float>(w_store.begin() + offset, w_store.end()), ref.w, "weights" + at);
    if (c.kind == OptimizerKind::kMomentum || c.kind == OptimizerKind::kNesterov) {
      ExpectClose(std::vector<float>(state_store[0].begin() + offset, state_store[0].end()), ref.v,
                  "velocity" + at);
    }
    if (c.kind == OptimizerKind::kAdam) {
      ExpectClose(std::vector<float>(state_store[0].begin() + offset, state_store[0].end()), ref.m,
                  "adam m" + at);
      // s is a mean of squares of order 1e-3..1: relative tolerance, tiny absolute floor.
      ExpectClose(std::vector<float>(state_store[1].begin() + offset, state_store[1].end()), ref.s,
                  "adam s" + at, 1e-5, 1e-9);
    }
    if (::testing::Test::HasFailure()) return;
  }
}

OptimizerConfig Config(OptimizerKind kind, float weight_decay) {
  OptimizerConfig c;
  c.kind = kind;
  c.weight_decay = weight_decay;
  // Large enough steps that a wrong term moves the weights far beyond the tolerance.
  c.lr = kind == OptimizerKind::kAdam ? 0.01f : 0.1f;
  return c;
}

const OptimizerKind kAllKinds[] = {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                                   OptimizerKind::kNesterov, OptimizerKind::kAdam,
                                   OptimizerKind::kAverage};
const std::size_t kLengths[] = {0, 1, 7, 15, 17, 1000, 4099};

// ---- Parameterized over optimizer x weight decay x N: all lengths, 5 steps each. ----
struct Case {
  OptimizerKind kind;
  float weight_decay;
  std::size_t n_inputs;
};

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  return OptimizerName(info.param.kind) + (info.param.weight_decay > 0 ? "_wd" : "_nowd") + "_N" +
         std::to_string(info.param.n_inputs);
}

class AggregateAndStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(AggregateAndStepTest, MatchesFloat64ReferenceOverFiveSteps) {
  const Case& p = GetParam();
  std::uint32_t seed = 1234;
  for (std::size_t len : kLengths) {
    CheckAgainstReference(Config(p.kind, p.weight_decay), p.n_inputs, len, /*steps=*/5,
                          /*offset=*/0, seed++);
  }
}

TEST_P(AggregateAndStepTest, MatchesReferenceWithUnalignedPointers) {
  const Case& p = GetParam();
  std::uint32_t seed = 99;
  for (std::size_t len : {std::size_t{17}, std::size_t{1000}, std::size_t{4099}}) {
    CheckAgainstReference(Config(p.kind, p.weight_decay), p.n_inputs, len, /*steps=*/3,
                          /*offset=*/1, seed++);
  }
}

std::vector<Case> AllCases() {
  std::vector<Case> cases;
  for (OptimizerKind kind : kAllKinds) {
    for (float wd : {0.0f, 0.01f}) {
      if (kind == OptimizerKind::kAverage && wd > 0) continue;  // Validate refuses it
      for (std::size_t n : {1, 2, 3, 8}) cases.push_back({kind, wd, n});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, AggregateAndStepTest, ::testing::ValuesIn(AllCases()),
                         CaseName);

// N > 4 goes through the blocked path; every remainder (N mod 4) and several blocks' worth of
// elements (the block is a few thousand floats) with a ragged last block.
TEST(AggregateAndStepBlockedTest, EveryInputCountUpToThirteenMatchesReference) {
  std::uint32_t seed = 7;
  for (std::size_t n = 1; n <= 13; ++n) {
    for (OptimizerKind kind : kAllKinds) {
      CheckAgainstReference(Config(kind, 0.01f), n, 10007, /*steps=*/2, /*offset=*/n % 2, seed++);
    }
  }
}

TEST(AggregateAndStepTest, AdamWithGradientsNearEpsMatchesReference) {
  // One input and no weight decay: g is exact, so even |g| ~ eps (where eps decides the step)
  // must match the float64 reference closely, over several steps.
  std::mt19937 rng(11);
  const std::size_t len = 1003;
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.lr = 0.01f;
  std::vector<float> w = RandomVector(rng, len, -1.0f, 1.0f), m(len, 0.0f), s(len, 0.0f);
  Reference ref;
  ref.w.assign(w.begin(), w.end());
  ref.m.assign(len, 0.0);
  ref.s.assign(len, 0.0);
  std::vector<float*> state = {m.data(), s.data()};
  std::uniform_real_distribution<float> exponent(-10.0f, -6.0f);
  for (std::uint64_t t = 1; t <= 4; ++t) {
    std::vector<float> g(len);
    for (float& x : g) x = (rng() % 2 ? 1.0f : -1.0f) * std::pow(10.0f, exponent(rng));
    std::vector<const float*> ptrs = {g.data()};
    AggregateAndStep(ptrs, w, state, c, t);
    ReferenceStep({g}, ref, c, t);
    ExpectClose(w, ref.w, "weights after step " + std::to_string(t), 1e-5, 1e-7);
    ExpectClose(s, ref.s, "adam s after step " + std::to_string(t), 1e-5, 0.0);
    if (HasFailure()) return;
  }
}

TEST(AggregateAndStepTest, InputsAreNotModified) {
  std::mt19937 rng(5);
  const std::size_t len = 4099;
  std::vector<std::vector<float>> grads;
  for (int k = 0; k < 8; ++k) grads.push_back(RandomVector(rng, len, -1.0f, 1.0f));
  const auto before = grads;
  std::vector<const float*> ptrs;
  for (auto& g : grads) ptrs.push_back(g.data());
  std::vector<float> w(len, 0.5f), m(len, 0.0f), s(len, 0.0f);
  std::vector<float*> state = {m.data(), s.data()};
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  AggregateAndStep(ptrs, w, state, c, 1);
  EXPECT_EQ(grads, before);
}

TEST(AggregateAndStepTest, ZeroLengthTouchesNothing) {
  std::vector<const float*> ptrs = {nullptr, nullptr};
  std::vector<float*> state = {nullptr, nullptr};
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  AggregateAndStep(ptrs, std::span<float>(), state, c, 1);  // Must not dereference anything.
}

// A hand-computed case, so a reference that shared a mistake with the kernel would still fail.
TEST(AggregateAndStepTest, SgdOnTwoInputsByHand) {
  std::vector<float> a = {1.0f, 2.0f, -4.0f}, b = {3.0f, 0.0f, 4.0f};
  std::vector<const float*> ptrs = {a.data(), b.data()};
  std::vector<float> w = {1.0f, 1.0f, 1.0f};
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.lr = 0.5f;
  c.weight_decay = 0.5f;
  AggregateAndStep(ptrs, w, {}, c, 1);
  // g = mean + 0.5*w = {2.5, 1.5, 0.5}; w -= 0.5*g.
  EXPECT_FLOAT_EQ(w[0], -0.25f);
  EXPECT_FLOAT_EQ(w[1], 0.25f);
  EXPECT_FLOAT_EQ(w[2], 0.75f);
}

TEST(AggregateAndStepTest, AdamFirstStepMovesEachWeightByAboutLr) {
  // At t=1 bias correction makes m_hat = g and s_hat = g*g, so the step is lr*sign(g).
  std::vector<float> g = {0.3f, -2.0f, 1e-2f};
  std::vector<const float*> ptrs = {g.data()};
  std::vector<float> w = {0.0f, 0.0f, 0.0f}, m(3, 0.0f), s(3, 0.0f);
  std::vector<float*> state = {m.data(), s.data()};
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.lr = 0.001f;
  AggregateAndStep(ptrs, w, state, c, 1);
  EXPECT_NEAR(w[0], -0.001f, 1e-7f);
  EXPECT_NEAR(w[1], 0.001f, 1e-7f);
  EXPECT_NEAR(w[2], -0.001f, 1e-6f);
}

}  // namespace
}  // namespace phub::kernels
