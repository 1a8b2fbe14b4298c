// Softmax + cross-entropy: cuDNN's log-softmax gives the log-probabilities (stable, max
// subtracted), which the op keeps for the backward. Picking each sample's -log p[label] and the
// gradient (exp(log p) - onehot) / N are a gather and an elementwise pass cuDNN has no call
// for (kernels.h). The N per-sample losses come back to the host and are summed in double,
// as the CPU backend does; Forward waits for them, it returns the number.
#include <vector>

#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class SoftmaxCrossEntropy final : public SoftmaxCrossEntropyOp {
 public:
  SoftmaxCrossEntropy(Context& ctx, const SoftmaxCrossEntropySpec& s) : ctx_(ctx), s_(s) {}

  Status Init() {
    PHUB_ASSIGN_OR_RETURN(log_probs_, DeviceMemory::Allocate(Bytes(s_.batch * s_.classes)));
    PHUB_ASSIGN_OR_RETURN(labels_, DeviceMemory::Allocate(Bytes(s_.batch)));
    PHUB_ASSIGN_OR_RETURN(losses_, DeviceMemory::Allocate(Bytes(s_.batch)));
    return SetNchw(desc_, "SoftmaxCrossEntropy", s_.batch, s_.classes, 1, 1);
  }

  StatusOr<double> Forward(const Tensor& logits, const Tensor& labels) override {
    PHUB_RETURN_IF_ERROR(CheckSoftmaxCrossEntropyForward(s_, Device::kCuda, logits, labels));
    PHUB_RETURN_IF_ERROR(UploadLabels(labels));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnSoftmaxForward(ctx_.cudnn(), CUDNN_SOFTMAX_LOG,
                                                   CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, desc_,
                                                   logits.data(), &kZero, desc_, log_probs_.get()));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchNllLoss(log_probs_.as<float>(), labels_.as<float>(),
                                            losses_.as<float>(), s_.batch, s_.classes,
                                            ctx_.stream()));
    std::vector<float> losses(static_cast<std::size_t>(s_.batch));
    PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(losses.data(), losses_.get(), losses_.bytes(),
                                              cudaMemcpyDeviceToHost, ctx_.stream()));
    PHUB_RETURN_IF_ERROR(ctx_.Synchronize());
    double loss = 0;
    for (float l : losses) loss += l;
    return loss / static_cast<double>(s_.batch);
  }

  Status Backward(const Tensor& labels, Tensor& dlogits) override {
    PHUB_RETURN_IF_ERROR(CheckSoftmaxCrossEntropyBackward(s_, Device::kCuda, labels, dlogits));
    PHUB_RETURN_IF_ERROR(UploadLabels(labels));
    PHUB_RETURN_IF_CUDA_ERROR(
        LaunchSoftmaxCrossEntropyBackward(log_probs_.as<float>(), labels_.as<float>(),
                                          dlogits.data(), s_.batch, s_.classes, ctx_.stream()));
    return absl::OkStatus();
  }

 private:
  static std::size_t Bytes(std::int64_t floats) {
    return static_cast<std::size_t>(floats) * sizeof(float);
  }

  // Labels are a host tensor (ops.h), checked (ops_checks.h) before any kernel indexes with them.
  Status UploadLabels(const Tensor& labels) {
    // From pageable memory the copy returns once the bytes are staged: labels may change after.
    PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(labels_.get(), labels.data(), labels_.bytes(),
                                              cudaMemcpyHostToDevice, ctx_.stream()));
    return absl::OkStatus();
  }

  Context& ctx_;
  SoftmaxCrossEntropySpec s_;
  TensorDesc desc_;  // [N, K, 1, 1]: softmax over K per sample
  DeviceMemory log_probs_, labels_, losses_;
};

}  // namespace

StatusOr<std::unique_ptr<SoftmaxCrossEntropyOp>> MakeSoftmaxCrossEntropy(
    Context& ctx, const SoftmaxCrossEntropySpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  auto op = std::make_unique<SoftmaxCrossEntropy>(ctx, spec);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
