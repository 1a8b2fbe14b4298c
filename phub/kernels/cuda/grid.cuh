// Launch shape shared by the project's CUDA kernels (the cuDNN backend's, the optimizer step):
// 256 threads a block and a grid-stride loop, so any element count (int64) runs with a bounded
// grid. Included by .cu files only.
#pragma once

#include <algorithm>
#include <cstdint>

namespace phub::kernels::cuda {

inline constexpr int kThreads = 256;

// Enough blocks to cover n once, capped (each thread then strides over several elements); more
// than enough to fill an H100's 132 SMs.
inline unsigned Blocks(std::int64_t n) {
  return static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 8192));
}

// for (i : GridStride(n)) visits each index in [0, n) once across the grid.
__device__ inline std::int64_t GridStart() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ inline std::int64_t GridStep() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace phub::kernels::cuda
