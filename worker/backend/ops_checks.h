// The checks of the tensors an op of ops.h is called with, one function per op and direction,
// shared by the backends: each op's Forward and Backward call its function here before they
// touch a tensor, so oneDNN and cuDNN refuse the same calls with the same message. (The spec
// checks, Validate in ops.h, run when an op is made; both are defined in ops.cc.) For backends
// only: layers see ops.h.
//
// A tensor argument passes when it is on `device` (the backend's), NCHW (every backend reads
// the bytes row-major) and holds the element count of the shape the spec gives it; its own shape
// may differ (a Linear layer passes an image batch [N, C, H, W] as x [N, In]). Anything else is
// InvalidArgument naming the op, the argument, the tensor and what it should be:
//   "Conv2d forward: x is [1, 3, 5, 4] cpu, expected [1, 3, 5, 5] cpu (75 elements, NCHW)".
// Arguments are checked in the order of the op's signature; the first failure is returned.
// Labels and ids are host data or device data read back by the backend: their values are
// checked too (a class index, a row of the table), before anything is written.
#pragma once

#include <cstdint>
#include <span>

#include "phub/common/status.h"
#include "phub/kernels/aggregate_and_step.h"
#include "worker/backend/ops.h"
#include "worker/tensor/tensor.h"

namespace phub::worker {

// One tensor argument: on `device`, NCHW, `expected.numel()` elements.
Status CheckTensor(const char* op, const char* arg, const Tensor& t, Device device,
                   const Shape& expected);

// Backend::OptimizerStep: grad, weights and each of kernels::StateArrays(config.kind) state
// tensors on `device` with the weights' element count, and step >= 1.
Status CheckOptimizerStep(Device device, const Tensor& grad, const Tensor& weights,
                          std::span<const Tensor> state, const kernels::OptimizerConfig& config,
                          std::uint64_t step);

Status CheckConv2dForward(const Conv2dSpec& s, Device device, const Tensor& x, const Tensor& w,
                          const Tensor& b, const Tensor& y);
// w and dx only when dx is wanted (non-null), b's gradient only with a bias.
Status CheckConv2dBackward(const Conv2dSpec& s, Device device, const Tensor& x, const Tensor& w,
                           const Tensor& dy, const Tensor* dx, const Tensor& dw, const Tensor& db);

Status CheckLinearForward(const LinearSpec& s, Device device, const Tensor& x, const Tensor& w,
                          const Tensor& b, const Tensor& y);
Status CheckLinearBackward(const LinearSpec& s, Device device, const Tensor& x, const Tensor& w,
                           const Tensor& dy, const Tensor* dx, const Tensor& dw, const Tensor& db);

Status CheckBatchNormForwardTraining(const BatchNormSpec& s, Device device, const Tensor& x,
                                     const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                     const Tensor& save_mean, const Tensor& save_var,
                                     const Tensor& running_mean, const Tensor& running_var);
Status CheckBatchNormForwardInference(const BatchNormSpec& s, Device device, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      const Tensor& y);
Status CheckBatchNormBackward(const BatchNormSpec& s, Device device, const Tensor& x,
                              const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                              const Tensor& dy, const Tensor& dx, const Tensor& dgamma,
                              const Tensor& dbeta);

// `shape`: the one the op was made for.
Status CheckActivationForward(const Shape& shape, Device device, const Tensor& x, const Tensor& y);
Status CheckActivationBackward(const Shape& shape, Device device, const Tensor& y, const Tensor& dy,
                               const Tensor& dx);

Status CheckPoolForward(const PoolSpec& s, Device device, const Tensor& x, const Tensor& y);
Status CheckPoolBackward(const PoolSpec& s, Device device, const Tensor& x, const Tensor& y,
                         const Tensor& dy, const Tensor& dx);

Status CheckLrnForward(const LrnSpec& s, Device device, const Tensor& x, const Tensor& y);
Status CheckLrnBackward(const LrnSpec& s, Device device, const Tensor& x, const Tensor& y,
                        const Tensor& dy, const Tensor& dx);

// Labels are a host tensor of `batch` class indices in [0, classes), whatever `device` is.
Status CheckSoftmaxCrossEntropyForward(const SoftmaxCrossEntropySpec& s, Device device,
                                       const Tensor& logits, const Tensor& labels);
Status CheckSoftmaxCrossEntropyBackward(const SoftmaxCrossEntropySpec& s, Device device,
                                        const Tensor& labels, const Tensor& dlogits);

Status CheckDropoutForward(const Shape& shape, Device device, const Tensor& x, const Tensor& y);
Status CheckDropoutBackward(const Shape& shape, Device device, const Tensor& dy, const Tensor& dx);

Status CheckShortcutForward(const ShortcutSpec& s, Device device, const Tensor& x, const Tensor& y);
Status CheckShortcutBackward(const ShortcutSpec& s, Device device, const Tensor& dy,
                             const Tensor& dx);

Status CheckLstmForward(const LstmSpec& s, Device device, const Tensor& x, const Tensor& w_ih,
                        const Tensor& w_hh, const Tensor& bias, const Tensor& y);
// dx only when wanted (non-null).
Status CheckLstmBackward(const LstmSpec& s, Device device, const Tensor& x, const Tensor& w_ih,
                         const Tensor& w_hh, const Tensor& bias, const Tensor& y, const Tensor& dy,
                         const Tensor* dx, const Tensor& dw_ih, const Tensor& dw_hh,
                         const Tensor& dbias);

// The tensors only; the ids' values are CheckEmbeddingIds' (a GPU backend reads them back first).
Status CheckEmbeddingForward(const EmbeddingSpec& s, Device device, const Tensor& ids,
                             const Tensor& table, const Tensor& y);
Status CheckEmbeddingBackward(const EmbeddingSpec& s, Device device, const Tensor& ids,
                              const Tensor& dy, const Tensor& dtable);
// Every id a row index in [0, vocab). REQUIRES: ids holds s.count values (host memory).
Status CheckEmbeddingIds(const EmbeddingSpec& s, std::span<const float> ids);

}  // namespace phub::worker
