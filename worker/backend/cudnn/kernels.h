// The cuDNN backend's own kernels: only what neither cuDNN nor cuBLAS offers (each op file says
// why it needs one). Host launchers in plain C++, so that the op files need no nvcc: each
// enqueues its kernel on `stream` and returns cudaGetLastError() for PHUB_RETURN_IF_CUDA_ERROR.
// Sizes are element counts; n = 0 launches nothing. Pointers are device memory unless said
// otherwise.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "phub/kernels/optimizer_update.h"

namespace phub::worker::cudnn {

// ---- elementwise.cu ----

// y[i] = x[i] / (1 - p) where DropoutKeeps(seed, i, p) (dropout_mask.h), else 0. Run on dy it
// is the backward. In place (y == x) is fine.
cudaError_t LaunchDropout(const float* x, float* y, std::int64_t n, std::uint64_t seed, float p,
                          cudaStream_t stream);

// Activation backward from the output y (ops.h): ReLU dx = dy * (y > 0); sigmoid
// dx = dy * y * (1 - y). dx may be dy.
cudaError_t LaunchReluBackward(const float* y, const float* dy, float* dx, std::int64_t n,
                               cudaStream_t stream);
cudaError_t LaunchSigmoidBackward(const float* y, const float* dy, float* dx, std::int64_t n,
                                  cudaStream_t stream);

// BatchNorm, per channel c: var[c] = 1 / inv_std[c]^2 - eps (cuDNN saves the inverse standard
// deviation, ops.h wants the variance), then PyTorch's running-stat update
//   running_mean = (1 - momentum) running_mean + momentum mean
//   running_var  = (1 - momentum) running_var  + momentum var * unbias   (unbias = m / (m - 1)).
cudaError_t LaunchBatchNormStats(const float* inv_std, const float* mean, float* var,
                                 float* running_mean, float* running_var, std::int64_t channels,
                                 float eps, float momentum, float unbias, cudaStream_t stream);
// inv_std[c] = 1 / sqrt(var[c] + eps): what cuDNN's backward takes.
cudaError_t LaunchInverseStd(const float* var, float* inv_std, std::int64_t channels, float eps,
                             cudaStream_t stream);

// Softmax cross-entropy from log-probabilities lp [N, K] and class labels [N] (floats holding
// checked indices): losses[n] = -lp[n, label n]; and dlogits = (exp(lp) - onehot) / N.
cudaError_t LaunchNllLoss(const float* log_probs, const float* labels, float* losses,
                          std::int64_t batch, std::int64_t classes, cudaStream_t stream);
cudaError_t LaunchSoftmaxCrossEntropyBackward(const float* log_probs, const float* labels,
                                              float* dlogits, std::int64_t batch,
                                              std::int64_t classes, cudaStream_t stream);

// x[i] uniform in [-1, 1), a hash of (seed, i): non-zero data to time convolution algorithms on
// (zeros can run faster than real data, and pick the wrong algorithm).
cudaError_t LaunchFillUniform(float* x, std::int64_t n, std::uint64_t seed, cudaStream_t stream);

// ---- gather.cu ----

// The option-A shortcut (ops.h ShortcutSpec), both directions written as gathers (one thread
// per output element, no atomics): y[n, c + pad_front, h, w] = x[n, c, h*s, w*s], zeros in the
// padded channels; dx[n, c, h, w] = dy[n, c + pad_front, h/s, w/s] where s divides h and w,
// else 0.
struct ShortcutDims {
  std::int64_t batch, in_channels, height, width;
  std::int64_t out_channels, out_height, out_width, stride, pad_front;
};
cudaError_t LaunchShortcutForward(const float* x, float* y, const ShortcutDims& d,
                                  cudaStream_t stream);
cudaError_t LaunchShortcutBackward(const float* dy, float* dx, const ShortcutDims& d,
                                   cudaStream_t stream);

// Embedding with ids [count] (floats holding checked row indices), table [vocab, dim]:
// y[i, :] = table[id i, :]; the backward ADDS dy[i, :] to dtable[id i, :] (atomics: repeated
// ids meet in one row), so the caller zeroes dtable first.
cudaError_t LaunchEmbeddingForward(const float* ids, const float* table, float* y,
                                   std::int64_t count, std::int64_t dim, cudaStream_t stream);
cudaError_t LaunchEmbeddingBackward(const float* ids, const float* dy, float* dtable,
                                    std::int64_t count, std::int64_t dim, cudaStream_t stream);

}  // namespace phub::worker::cudnn
