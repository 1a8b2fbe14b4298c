// One optimizer step on a GPU: phub/kernels/optimizer_update.h's per-element code (the very
// equations phubd's fused kernel runs) compiled for the device. Used where the weights live on
// the GPU: the cuDNN backend's single-worker step and the NCCL exchange's step after its
// allreduce. Free of CUDA headers: `stream` is a cudaStream_t.
#pragma once

#include <cstdint>

#include "phub/common/status.h"
#include "phub/kernels/optimizer_update.h"

namespace phub::kernels::cuda {

// Enqueues w[0, n) -= the step from g on `stream`; s0 and s1 are the state arrays the kind
// keeps (else null), all device memory; `k` from kernels::Prepare(1, ...). InvalidArgument for
// kAverage (summation mode steps nothing); the launch's CUDA error otherwise.
Status LaunchOptimizerStep(const float* g, float* w, float* s0, float* s1, std::int64_t n,
                           OptimizerKind kind, const StepConstants& k, void* stream);

}  // namespace phub::kernels::cuda
