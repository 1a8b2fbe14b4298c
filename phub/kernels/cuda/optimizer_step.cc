#include "phub/kernels/cuda/optimizer_step.h"

#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"

namespace phub::kernels::cuda {

// optimizer_step.cu
int LaunchOptimizerStepKernel(const float* g, float* w, float* s0, float* s1, std::int64_t n,
                              OptimizerKind kind, const StepConstants& k, void* stream);

Status LaunchOptimizerStep(const float* g, float* w, float* s0, float* s1, std::int64_t n,
                           OptimizerKind kind, const StepConstants& k, void* stream) {
  if (n == 0) return absl::OkStatus();
  const int e = LaunchOptimizerStepKernel(g, w, s0, s1, n, kind, k, stream);
  if (e == -1) {
    return absl::InvalidArgumentError(
        "the optimizer step of kind 'average' (phubd's summation mode) steps nothing: a "
        "worker's own optimizer is sgd, momentum, nesterov or adam");
  }
  if (e != cudaSuccess) {
    const auto error = static_cast<cudaError_t>(e);
    return absl::InternalError(absl::StrCat("the optimizer step's kernel launch (", n,
                                            " elements) failed: ", cudaGetErrorName(error), " (",
                                            cudaGetErrorString(error), ")"));
  }
  return absl::OkStatus();
}

}  // namespace phub::kernels::cuda
