// The kernel (nvcc); optimizer_step.cc turns its launch's error into a Status, so that no
// absl header goes through nvcc.
#include <cuda_runtime.h>

#include <cstdint>

#include "phub/kernels/cuda/grid.cuh"
#include "phub/kernels/optimizer_update.h"

namespace phub::kernels::cuda {
namespace {

template <OptimizerKind kKind>
__global__ void OptimizerStep(const float* g, float* w, float* s0, float* s1, std::int64_t n,
                              StepConstants k) {
  for (std::int64_t i = GridStart(); i < n; i += GridStep()) {
    float t0 = UsesFirstState(kKind) ? s0[i] : 0.0f;
    float t1 = UsesSecondState(kKind) ? s1[i] : 0.0f;
    w[i] = UpdateElement<kKind>(g[i], w[i], t0, t1, k);
    if (UsesFirstState(kKind)) s0[i] = t0;
    if (UsesSecondState(kKind)) s1[i] = t1;
  }
}

template <OptimizerKind kKind>
void Launch(const float* g, float* w, float* s0, float* s1, std::int64_t n, const StepConstants& k,
            cudaStream_t stream) {
  OptimizerStep<kKind><<<Blocks(n), kThreads, 0, stream>>>(g, w, s0, s1, n, k);
}

}  // namespace

// cudaError_t as int; -1 for kAverage.
int LaunchOptimizerStepKernel(const float* g, float* w, float* s0, float* s1, std::int64_t n,
                              OptimizerKind kind, const StepConstants& k, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  switch (kind) {
    case OptimizerKind::kSgd:
      Launch<OptimizerKind::kSgd>(g, w, s0, s1, n, k, s);
      break;
    case OptimizerKind::kMomentum:
      Launch<OptimizerKind::kMomentum>(g, w, s0, s1, n, k, s);
      break;
    case OptimizerKind::kNesterov:
      Launch<OptimizerKind::kNesterov>(g, w, s0, s1, n, k, s);
      break;
    case OptimizerKind::kAdam:
      Launch<OptimizerKind::kAdam>(g, w, s0, s1, n, k, s);
      break;
    case OptimizerKind::kAverage:
      return -1;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace phub::kernels::cuda
