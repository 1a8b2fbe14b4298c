// AggregateAndStep: tall aggregation fused with the optimizer update, in one pass over memory.
//
// Why one pass: the kernel is memory-bound (a few flops per element against (N + 2 + 2*state)
// floats moved), so its cost is the bytes it streams. Summing the N copies into a chunk-sized
// temporary and then running the optimizer over it would read and write that temporary from
// DRAM once more; fusing the two keeps every byte moved exactly once: each input read once,
// weights and state read once and written once.
//
// How:
//  * N <= 4: one loop over the chunk that, per element, adds the N inputs in registers and
//    applies the update (UpdateRange<kind, N>). Nothing else touches memory.
//  * N > 4: the chunk is cut into blocks of kBlock floats (8 KiB, well inside L1). For each block
//    the first N - r inputs (r = ((N-1) mod 4) + 1, so 1..4) are summed into a stack buffer four
//    at a time (first group stores, later groups add), then UpdateRange<kind, r + 1> reads that
//    buffer as one more input beside the last r inputs. The buffer never leaves L1, so DRAM
//    traffic is still one read of every input and one read+write of weights and state; at most
//    ceil(N/4) passes over each L1 block, and only ~5 DRAM streams are read at a time, which
//    the hardware prefetchers follow well.
// Every loop is a plain indexed loop over __restrict pointers, auto-vectorized by the compiler
// (built with -O3 [-march=native] and -fno-math-errno so Adam's sqrt vectorizes); unaligned
// pointers and any length are handled by the vectorizer's prologue/epilogue.
//
// Compact inputs (bf16, fp16: --wire) are widened to float as they are loaded, in the same
// pass: half the input bytes, the same arithmetic.
//
// Numerics: sums in float, in input order grouped by four; Adam's bias corrections are computed
// once per call in double and folded into two float constants.
#include "phub/kernels/aggregate_and_step.h"

#include "phub/kernels/optimizer_update.h"
#include "phub/kernels/wire_format.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstddef>

namespace phub::kernels {
namespace {

// Floats per block for N > 4: 2048 floats = 8 KiB, so the buffer plus one block of each of the
// (up to 4) inputs summed in a pass fit a 32 KiB L1. Measured 1024..4096 within noise.
constexpr std::size_t kBlock = 2048;
// Inputs the update loop adds in registers besides the block buffer.
constexpr std::size_t kGroup = 4;

// w[j] (and state) updated from the sum of K inputs a..e at j (inputs beyond K are unused and
// may be null). All pointers are distinct arrays, hence __restrict.
// kOut: the old weights are read from w_in and the new ones written to w (out of place, for a
// caller that keeps the previous weights); otherwise w is read and written in place.
// A is the first input's element type and In the others' (float, or a compact wire format that
// ToFloat widens in the same pass: the N > 4 path passes its float block buffer as `a`).
template <OptimizerKind kKind, int K, bool kOut, class A, class In>
void UpdateRange(const A* __restrict a, const In* __restrict b, const In* __restrict c,
                 const In* __restrict d, const In* __restrict e,
                 const float* __restrict w_in, float* __restrict w, float* __restrict s0,
                 float* __restrict s1, std::size_t n, const StepConstants& k) {
  static_assert(K >= 1 && K <= 5);
  // A local copy, so the compiler need not reload the constants after stores through w/s0/s1.
  const StepConstants kc = k;
#pragma GCC ivdep
  for (std::size_t j = 0; j < n; ++j) {
    float sum = ToFloat(a[j]);
    if constexpr (K >= 2) sum += ToFloat(b[j]);
    if constexpr (K >= 3) sum += ToFloat(c[j]);
    if constexpr (K >= 4) sum += ToFloat(d[j]);
    if constexpr (K >= 5) sum += ToFloat(e[j]);
    const float wj = kOut ? w_in[j] : w[j];
    // State through locals: an optimizer without s0 or s1 has null pointers there.
    float t0 = UsesFirstState(kKind) ? s0[j] : 0.0f;
    float t1 = UsesSecondState(kKind) ? s1[j] : 0.0f;
    w[j] = UpdateElement<kKind>(sum, wj, t0, t1, kc);
    if constexpr (UsesFirstState(kKind)) s0[j] = t0;
    if constexpr (UsesSecondState(kKind)) s1[j] = t1;
  }
}

// dst[j] = (kAdd ? dst[j] : 0) + a[j] + b[j] + c[j] + d[j].
template <bool kAdd, class In>
void SumFour(float* __restrict dst, const In* __restrict a, const In* __restrict b,
             const In* __restrict c, const In* __restrict d, std::size_t n) {
#pragma GCC ivdep
  for (std::size_t j = 0; j < n; ++j) {
    const float s = (ToFloat(a[j]) + ToFloat(b[j])) + (ToFloat(c[j]) + ToFloat(d[j]));
    if constexpr (kAdd) {
      dst[j] += s;
    } else {
      dst[j] = s;
    }
  }
}

template <OptimizerKind kKind, bool kOut, class In>
void Run(std::span<const In* const> in, const float* w_in, float* w, float* s0, float* s1,
         std::size_t len, const StepConstants& k) {
  constexpr const In* kNone = nullptr;
  const std::size_t n_in = in.size();
  switch (n_in) {
    case 1:
      return UpdateRange<kKind, 1, kOut>(in[0], kNone, kNone, kNone, kNone, w_in, w, s0, s1, len,
                                         k);
    case 2:
      return UpdateRange<kKind, 2, kOut>(in[0], in[1], kNone, kNone, kNone, w_in, w, s0, s1, len,
                                         k);
    case 3:
      return UpdateRange<kKind, 3, kOut>(in[0], in[1], in[2], kNone, kNone, w_in, w, s0, s1, len,
                                         k);
    case 4:
      return UpdateRange<kKind, 4, kOut>(in[0], in[1], in[2], in[3], kNone, w_in, w, s0, s1, len,
                                         k);
    default:
      break;
  }

  // N > 4: the first `buffered` inputs (a multiple of 4) are summed into `block` per block; the
  // last `rest` (1..4) are added by the update loop itself.
  const std::size_t rest = (n_in - 1) % kGroup + 1;
  const std::size_t buffered = n_in - rest;
  alignas(64) float block[kBlock];
  for (std::size_t off = 0; off < len; off += kBlock) {
    const std::size_t m = std::min(kBlock, len - off);
    for (std::size_t i = 0; i < buffered; i += kGroup) {
      if (i == 0) {
        SumFour<false>(block, in[0] + off, in[1] + off, in[2] + off, in[3] + off, m);
      } else {
        SumFour<true>(block, in[i] + off, in[i + 1] + off, in[i + 2] + off, in[i + 3] + off, m);
      }
    }
    const In* const* r = in.data() + buffered;
    float* const wb = w + off;
    const float* const wib = kOut ? w_in + off : nullptr;
    float* const s0b = s0 ? s0 + off : nullptr;
    float* const s1b = s1 ? s1 + off : nullptr;
    switch (rest) {
      case 1:
        UpdateRange<kKind, 2, kOut>(block, r[0] + off, kNone, kNone, kNone, wib, wb, s0b, s1b, m,
                                    k);
        break;
      case 2:
        UpdateRange<kKind, 3, kOut>(block, r[0] + off, r[1] + off, kNone, kNone, wib, wb, s0b,
                                    s1b, m, k);
        break;
      case 3:
        UpdateRange<kKind, 4, kOut>(block, r[0] + off, r[1] + off, r[2] + off, kNone, wib, wb,
                                    s0b, s1b, m, k);
        break;
      default:
        UpdateRange<kKind, 5, kOut>(block, r[0] + off, r[1] + off, r[2] + off, r[3] + off, wib,
                                    wb, s0b, s1b, m, k);
        break;
    }
  }
}

template <bool kOut, class In>
void Dispatch(std::span<const In* const> inputs, const float* w_in, float* w,
              std::span<float* const> state, std::size_t len, const OptimizerConfig& config,
              std::uint64_t step) {
  assert(!inputs.empty() && "AggregateAndStep needs at least one input");
  assert(state.size() >= static_cast<std::size_t>(StateArrays(config.kind)));
  if (len == 0 || inputs.empty()) return;
  const StepConstants k = Prepare(inputs.size(), config, step);
  float* const s0 = state.size() > 0 ? state[0] : nullptr;
  float* const s1 = state.size() > 1 ? state[1] : nullptr;
  switch (config.kind) {
    case OptimizerKind::kSgd:
      return Run<OptimizerKind::kSgd, kOut, In>(inputs, w_in, w, nullptr, nullptr, len, k);
    case OptimizerKind::kMomentum:
      return Run<OptimizerKind::kMomentum, kOut, In>(inputs, w_in, w, s0, nullptr, len, k);
    case OptimizerKind::kNesterov:
      return Run<OptimizerKind::kNesterov, kOut, In>(inputs, w_in, w, s0, nullptr, len, k);
    case OptimizerKind::kAdam:
      return Run<OptimizerKind::kAdam, kOut, In>(inputs, w_in, w, s0, s1, len, k);
    case OptimizerKind::kAverage:
      return Run<OptimizerKind::kAverage, kOut, In>(inputs, w_in, w, nullptr, nullptr, len, k);
  }
}

}  // namespace

StepConstants Prepare(std::size_t n_inputs, const OptimizerConfig& config, std::uint64_t step) {
  StepConstants k{};
  k.inv_n = static_cast<float>(
      1.0 / static_cast<double>(config.copies > 0 ? config.copies : n_inputs));
  k.wd = config.weight_decay;
  k.lr = config.lr;
  k.mu = config.momentum;
  k.b1 = config.beta1;
  k.omb1 = static_cast<float>(1.0 - static_cast<double>(config.beta1));
  k.b2 = config.beta2;
  k.omb2 = static_cast<float>(1.0 - static_cast<double>(config.beta2));
  k.eps = config.eps;
  if (config.kind == OptimizerKind::kAdam) {
    assert(step >= 1 && "Adam's step t counts from 1");
    const double t = static_cast<double>(step);
    const double bc1 = 1.0 - std::pow(static_cast<double>(config.beta1), t);
    const double bc2 = 1.0 - std::pow(static_cast<double>(config.beta2), t);
    k.adam_step = static_cast<float>(static_cast<double>(config.lr) / bc1);
    k.adam_inv_bc2 = static_cast<float>(1.0 / bc2);
  }
  return k;
}

void AggregateAndStep(std::span<const float* const> inputs, std::span<float> weights,
                      std::span<float* const> state, const OptimizerConfig& config,
                      std::uint64_t step) {
  Dispatch<false>(inputs, nullptr, weights.data(), state, weights.size(), config, step);
}
void AggregateAndStep(std::span<const Bf16* const> inputs, std::span<float> weights,
                      std::span<float* const> state, const OptimizerConfig& config,
                      std::uint64_t step) {
  Dispatch<false>(inputs, nullptr, weights.data(), state, weights.size(), config, step);
}
void AggregateAndStep(std::span<const Fp16* const> inputs, std::span<float> weights,
                      std::span<float* const> state, const OptimizerConfig& config,
                      std::uint64_t step) {
  Dispatch<false>(inputs, nullptr, weights.data(), state, weights.size(), config, step);
}

void AggregateAndStep(std::span<const float* const> inputs, std::span<const float> weights_in,
                      std::span<float> weights_out, std::span<float* const> state,
                      const OptimizerConfig& config, std::uint64_t step) {
  assert(weights_in.size() == weights_out.size());
  Dispatch<true>(inputs, weights_in.data(), weights_out.data(), state, weights_out.size(), config,
                 step);
}
void AggregateAndStep(std::span<const Bf16* const> inputs, std::span<const float> weights_in,
                      std::span<float> weights_out, std::span<float* const> state,
                      const OptimizerConfig& config, std::uint64_t step) {
  assert(weights_in.size() == weights_out.size());
  Dispatch<true>(inputs, weights_in.data(), weights_out.data(), state, weights_out.size(), config,
                 step);
}
void AggregateAndStep(std::span<const Fp16* const> inputs, std::span<const float> weights_in,
                      std::span<float> weights_out, std::span<float* const> state,
                      const OptimizerConfig& config, std::uint64_t step) {
  assert(weights_in.size() == weights_out.size());
  Dispatch<true>(inputs, weights_in.data(), weights_out.data(), state, weights_out.size(), config,
                 step);
}

}  // namespace phub::kernels
