// Index kernels of the cuDNN backend: the option-A shortcut and the embedding lookup (kernels.h).
#include "phub/kernels/cuda/grid.cuh"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

using ::phub::kernels::cuda::Blocks;
using ::phub::kernels::cuda::GridStart;
using ::phub::kernels::cuda::GridStep;
using ::phub::kernels::cuda::kThreads;

__global__ void ShortcutForward(const float* x, float* y, ShortcutDims d) {
  const std::int64_t n_y = d.batch * d.out_channels * d.out_height * d.out_width;
  for (std::int64_t i = GridStart(); i < n_y; i += GridStep()) {
    const std::int64_t w = i % d.out_width;
    const std::int64_t h = i / d.out_width % d.out_height;
    const std::int64_t c = i / (d.out_width * d.out_height) % d.out_channels;
    const std::int64_t n = i / (d.out_width * d.out_height * d.out_channels);
    const std::int64_t xc = c - d.pad_front;
    y[i] = xc >= 0 && xc < d.in_channels
               ? x[((n * d.in_channels + xc) * d.height + h * d.stride) * d.width + w * d.stride]
               : 0.0f;
  }
}

__global__ void ShortcutBackward(const float* dy, float* dx, ShortcutDims d) {
  const std::int64_t n_x = d.batch * d.in_channels * d.height * d.width;
  for (std::int64_t i = GridStart(); i < n_x; i += GridStep()) {
    const std::int64_t w = i % d.width;
    const std::int64_t h = i / d.width % d.height;
    const std::int64_t c = i / (d.width * d.height) % d.in_channels;
    const std::int64_t n = i / (d.width * d.height * d.in_channels);
    dx[i] = h % d.stride == 0 && w % d.stride == 0
                ? dy[((n * d.out_channels + c + d.pad_front) * d.out_height + h / d.stride) *
                         d.out_width +
                     w / d.stride]
                : 0.0f;
  }
}

__global__ void EmbeddingForward(const float* ids, const float* table, float* y, std::int64_t count,
                                 std::int64_t dim) {
  for (std::int64_t i = GridStart(); i < count * dim; i += GridStep()) {
    const auto row = static_cast<std::int64_t>(ids[i / dim]);
    y[i] = table[row * dim + i % dim];
  }
}

__global__ void EmbeddingBackward(const float* ids, const float* dy, float* dtable,
                                  std::int64_t count, std::int64_t dim) {
  for (std::int64_t i = GridStart(); i < count * dim; i += GridStep()) {
    const auto row = static_cast<std::int64_t>(ids[i / dim]);
    atomicAdd(&dtable[row * dim + i % dim], dy[i]);
  }
}

}  // namespace

cudaError_t LaunchShortcutForward(const float* x, float* y, const ShortcutDims& d,
                                  cudaStream_t stream) {
  const std::int64_t n = d.batch * d.out_channels * d.out_height * d.out_width;
  if (n == 0) return cudaSuccess;
  ShortcutForward<<<Blocks(n), kThreads, 0, stream>>>(x, y, d);
  return cudaGetLastError();
}

cudaError_t LaunchShortcutBackward(const float* dy, float* dx, const ShortcutDims& d,
                                   cudaStream_t stream) {
  const std::int64_t n = d.batch * d.in_channels * d.height * d.width;
  if (n == 0) return cudaSuccess;
  ShortcutBackward<<<Blocks(n), kThreads, 0, stream>>>(dy, dx, d);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingForward(const float* ids, const float* table, float* y,
                                   std::int64_t count, std::int64_t dim, cudaStream_t stream) {
  if (count * dim == 0) return cudaSuccess;
  EmbeddingForward<<<Blocks(count * dim), kThreads, 0, stream>>>(ids, table, y, count, dim);
  return cudaGetLastError();
}

cudaError_t LaunchEmbeddingBackward(const float* ids, const float* dy, float* dtable,
                                    std::int64_t count, std::int64_t dim, cudaStream_t stream) {
  if (count * dim == 0) return cudaSuccess;
  EmbeddingBackward<<<Blocks(count * dim), kThreads, 0, stream>>>(ids, dy, dtable, count, dim);
  return cudaGetLastError();
}

}  // namespace phub::worker::cudnn
