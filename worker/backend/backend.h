// Backend: makes the ops of worker/backend/ops.h for one device, plus the few elementwise
// helpers every model needs. onednn/ (CPU) and cudnn/ (GPU) implement it; worker/nn/ layers
// only see this interface. Errors are returned (ops.h), never thrown: InvalidArgument for a bad
// spec or tensor, ResourceExhausted when memory runs out, the library's failure otherwise.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "phub/kernels/aggregate_and_step.h"
#include "phub/staging/copy_engine.h"
#include "worker/backend/ops.h"
#include "worker/tensor/tensor.h"

namespace phub::worker {

class Backend {
 public:
  virtual ~Backend() = default;

  virtual Device device() const = 0;
  // e.g. "oneDNN 2.6.3 (cpu, 2 threads)"; printed by phub-worker and the benchmarks.
  virtual std::string Describe() const = 0;

  virtual StatusOr<std::unique_ptr<Conv2dOp>> MakeConv2d(const Conv2dSpec& spec) = 0;
  virtual StatusOr<std::unique_ptr<LinearOp>> MakeLinear(const LinearSpec& spec) = 0;
  virtual StatusOr<std::unique_ptr<BatchNormOp>> MakeBatchNorm(const BatchNormSpec& spec) = 0;
  // `shape` is the shape of the tensors it will see.
  virtual StatusOr<std::unique_ptr<ActivationOp>> MakeActivation(ActivationKind kind,
                                                                 const Shape& shape) = 0;
  virtual StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolSpec& spec) = 0;
  virtual StatusOr<std::unique_ptr<ShortcutOp>> MakeShortcut(const ShortcutSpec& spec) = 0;
  // p in [0, 1).
  virtual StatusOr<std::unique_ptr<DropoutOp>> MakeDropout(const Shape& shape, float p) = 0;
  virtual StatusOr<std::unique_ptr<LrnOp>> MakeLrn(const LrnSpec& spec) = 0;
  virtual StatusOr<std::unique_ptr<SoftmaxCrossEntropyOp>> MakeSoftmaxCrossEntropy(
      const SoftmaxCrossEntropySpec& spec) = 0;
  virtual StatusOr<std::unique_ptr<LstmOp>> MakeLstm(const LstmSpec& spec) = 0;
  virtual StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(const EmbeddingSpec& spec) = 0;

  // y = a + b (y may alias a or b): residual connections.
  virtual Status Add(const Tensor& a, const Tensor& b, Tensor& y) = 0;
  // y += x: gradients of a tensor used twice.
  virtual Status Accumulate(const Tensor& x, Tensor& y) = 0;
  // One optimizer step of one parameter where it lives (single-worker training; in distributed
  // runs phubd steps): phub/kernels' AggregateAndStep with the gradient as the one input, the
  // weights updated in place. `state` is kernels::StateArrays(config.kind) tensors of the
  // weights' size on this device, zero before the first step; `step` counts from 1 (Adam's t);
  // `config` is valid (kernels::Validate). Same equations and order on every backend
  // (phub/kernels/optimizer_update.h).
  virtual Status OptimizerStep(const Tensor& grad, Tensor& weights, std::span<Tensor> state,
                               const kernels::OptimizerConfig& config, std::uint64_t step) = 0;
  // A tensor on this backend's device (ResourceExhausted when it is out of memory); copies
  // between host and device.
  virtual StatusOr<Tensor> Allocate(const Shape& shape) = 0;
  virtual Status CopyFromHost(const Tensor& host, Tensor& mine) = 0;
  virtual Status CopyToHost(const Tensor& mine, Tensor& host) = 0;
  // Between two tensors of this device.
  virtual Status Copy(const Tensor& from, Tensor& to) = 0;
  // The stream this backend enqueues its work on (a cudaStream_t), for an exchange to order its
  // copies against; nullptr on the CPU, whose ops have finished when they return.
  virtual void* stream() const { return nullptr; }
  // The copy engine between this device's memory and host memory (phub/staging/copy_engine.h):
  // CUDA streams and pinned staging on a GPU; on the CPU the host engine, which copies nothing
  // between a buffer and itself.
  virtual StatusOr<std::unique_ptr<staging::CopyEngine>> MakeCopyEngine() = 0;
  // Waits for every op issued so far (no-op on the CPU); an asynchronous failure of an earlier
  // op may be reported here.
  virtual Status Synchronize() = 0;
};

}  // namespace phub::worker
