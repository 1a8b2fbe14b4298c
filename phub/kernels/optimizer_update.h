// The optimizer's per-element update (aggregate_and_step.h gives the equations), written once
// for every place that steps weights: phubd's fused aggregation (aggregate_and_step.cc, on the
// CPU) and the cuDNN worker's single-GPU step (worker/backend/cudnn/elementwise.cu, compiled by
// nvcc, hence the host-device qualifier). Same expressions in the same order, so a GPU step
// differs from the CPU's only by contraction into fused multiply-adds (nvcc contracts by
// default; GCC on x86 keeps separate roundings without -ffp-contract=fast).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "phub/common/host_device.h"
#include "phub/kernels/optimizer_config.h"

namespace phub::kernels {

// Which state arrays a kind reads and writes (StateArrays() counts them).
PHUB_HOST_DEVICE constexpr bool UsesFirstState(OptimizerKind kind) {
  return kind == OptimizerKind::kMomentum || kind == OptimizerKind::kNesterov ||
         kind == OptimizerKind::kAdam;
}
PHUB_HOST_DEVICE constexpr bool UsesSecondState(OptimizerKind kind) {
  return kind == OptimizerKind::kAdam;
}

// Hyper-parameters prepared once per call (Prepare).
struct StepConstants {
  float inv_n;  // 1/N
  float wd;     // weight decay (L2)
  float lr;
  float mu;        // momentum
  float b1, omb1;  // beta1, 1 - beta1
  float b2, omb2;  // beta2, 1 - beta2
  float eps;
  float adam_step;     // lr / (1 - beta1^t)
  float adam_inv_bc2;  // 1 / (1 - beta2^t)
};

// N inputs; `step` is Adam's t (>= 1). Bias corrections in double, folded into two floats.
StepConstants Prepare(std::size_t n_inputs, const OptimizerConfig& config, std::uint64_t step);

// One element: `sum` of the N inputs, the old weight `wj`; the state s0 (velocity, or Adam's m)
// and s1 (Adam's s) updated in place (unused ones untouched); returns the new weight.
template <OptimizerKind kKind>
PHUB_HOST_DEVICE inline float UpdateElement(float sum, float wj, float& s0, float& s1,
                                            const StepConstants& k) {
  if constexpr (kKind == OptimizerKind::kAverage) return sum * k.inv_n;  // wj unused
  const float g = sum * k.inv_n + k.wd * wj;
  if constexpr (kKind == OptimizerKind::kSgd) {
    return wj - k.lr * g;
  } else if constexpr (kKind == OptimizerKind::kMomentum) {
    const float v = k.mu * s0 + g;
    s0 = v;
    return wj - k.lr * v;
  } else if constexpr (kKind == OptimizerKind::kNesterov) {
    const float v = k.mu * s0 + g;
    s0 = v;
    return wj - k.lr * (g + k.mu * v);
  } else {
    const float m = k.b1 * s0 + k.omb1 * g;
    const float s = k.b2 * s1 + k.omb2 * (g * g);
    s0 = m;
    s1 = s;
    return wj - k.adam_step * m / (std::sqrt(s * k.adam_inv_bc2) + k.eps);
  }
}

}  // namespace phub::kernels
