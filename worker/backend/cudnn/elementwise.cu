// Elementwise kernels of the cuDNN backend (kernels.h says what each computes and why it exists).
#include <cmath>

#include "worker/backend/cudnn/dropout_mask.h"
#include "phub/kernels/cuda/grid.cuh"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

using ::phub::kernels::cuda::Blocks;
using ::phub::kernels::cuda::GridStart;
using ::phub::kernels::cuda::GridStep;
using ::phub::kernels::cuda::kThreads;

__global__ void Dropout(const float* x, float* y, std::int64_t n, std::uint64_t seed, float p,
                        float scale) {
  for (std::int64_t i = GridStart(); i < n; i += GridStep()) {
    y[i] = DropoutKeeps(seed, static_cast<std::uint64_t>(i), p) ? x[i] * scale : 0.0f;
  }
}

__global__ void ReluBackward(const float* y, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = GridStart(); i < n; i += GridStep()) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

__global__ void SigmoidBackward(const float* y, const float* dy, float* dx, std::int64_t n) {
  for (std::int64_t i = GridStart(); i < n; i += GridStep()) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
}

__global__ void BatchNormStats(const float* inv_std, const float* mean, float* var,
                               float* running_mean, float* running_var, std::int64_t channels,
                               float eps, float momentum, float unbias) {
  for (std::int64_t c = GridStart(); c < channels; c += GridStep()) {
    const float v = fmaxf(1.0f / (inv_std[c] * inv_std[c]) - eps, 0.0f);
    var[c] = v;
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * v * unbias;
  }
}

__global__ void InverseStd(const float* var, float* inv_std, std::int64_t channels, float eps) {
  for (std::int64_t c = GridStart(); c < channels; c += GridStep()) {
    inv_std[c] = 1.0f / sqrtf(var[c] + eps);
  }
}

__global__ void NllLoss(const float* log_probs, const float* labels, float* losses,
                        std::int64_t batch, std::int64_t classes) {
  for (std::int64_t n = GridStart(); n < batch; n += GridStep()) {
    losses[n] = -log_probs[n * classes + static_cast<std::int64_t>(labels[n])];
  }
}

__global__ void SoftmaxCrossEntropyBackward(const float* log_probs, const float* labels,
                                            float* dlogits, std::int64_t batch,
                                            std::int64_t classes, float inv_n) {
  for (std::int64_t i = GridStart(); i < batch * classes; i += GridStep()) {
    const std::int64_t n = i / classes, k = i % classes;
    const float onehot = k == static_cast<std::int64_t>(labels[n]) ? inv_n : 0.0f;
    dlogits[i] = expf(log_probs[i]) * inv_n - onehot;
  }
}

__global__ void FillUniform(float* x, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = GridStart(); i < n; i += GridStep()) {
    // 24 random bits of (seed, i) -> [-1, 1).
    const std::uint64_t z = SplitMix64(seed, static_cast<std::uint64_t>(i));
    x[i] = static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
}

}  // namespace

cudaError_t LaunchFillUniform(float* x, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  FillUniform<<<Blocks(n), kThreads, 0, stream>>>(x, n, seed);
  return cudaGetLastError();
}

cudaError_t LaunchDropout(const float* x, float* y, std::int64_t n, std::uint64_t seed, float p,
                          cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  Dropout<<<Blocks(n), kThreads, 0, stream>>>(x, y, n, seed, p, 1.0f / (1.0f - p));
  return cudaGetLastError();
}

cudaError_t LaunchReluBackward(const float* y, const float* dy, float* dx, std::int64_t n,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  ReluBackward<<<Blocks(n), kThreads, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t LaunchSigmoidBackward(const float* y, const float* dy, float* dx, std::int64_t n,
                                  cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  SigmoidBackward<<<Blocks(n), kThreads, 0, stream>>>(y, dy, dx, n);
  return cudaGetLastError();
}

cudaError_t LaunchBatchNormStats(const float* inv_std, const float* mean, float* var,
                                 float* running_mean, float* running_var, std::int64_t channels,
                                 float eps, float momentum, float unbias, cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  BatchNormStats<<<Blocks(channels), kThreads, 0, stream>>>(
      inv_std, mean, var, running_mean, running_var, channels, eps, momentum, unbias);
  return cudaGetLastError();
}

cudaError_t LaunchInverseStd(const float* var, float* inv_std, std::int64_t channels, float eps,
                             cudaStream_t stream) {
  if (channels == 0) return cudaSuccess;
  InverseStd<<<Blocks(channels), kThreads, 0, stream>>>(var, inv_std, channels, eps);
  return cudaGetLastError();
}

cudaError_t LaunchNllLoss(const float* log_probs, const float* labels, float* losses,
                          std::int64_t batch, std::int64_t classes, cudaStream_t stream) {
  if (batch == 0) return cudaSuccess;
  NllLoss<<<Blocks(batch), kThreads, 0, stream>>>(log_probs, labels, losses, batch, classes);
  return cudaGetLastError();
}

cudaError_t LaunchSoftmaxCrossEntropyBackward(const float* log_probs, const float* labels,
                                              float* dlogits, std::int64_t batch,
                                              std::int64_t classes, cudaStream_t stream) {
  if (batch * classes == 0) return cudaSuccess;
  SoftmaxCrossEntropyBackward<<<Blocks(batch * classes), kThreads, 0, stream>>>(
      log_probs, labels, dlogits, batch, classes, 1.0f / static_cast<float>(batch));
  return cudaGetLastError();
}

}  // namespace phub::worker::cudnn
