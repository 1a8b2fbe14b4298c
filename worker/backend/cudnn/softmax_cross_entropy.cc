// Softmax + cross-entropy: cuDNN's log-softmax gives the log-probabilities (stable, max
// subtracted), which the op keeps for the backward. Picking each sample's -log p[label] and the
// gradient (exp(log p) - onehot) / N are a gather and an elementwise pass cuDNN has no call
// for (kernels.h). The N per-sample losses come back to the host and are summed in double,
// as the CPU backend does; Forward waits for them, it returns the number.
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class SoftmaxCrossEntropy final : public SoftmaxCrossEntropyOp {
 public:
  SoftmaxCrossEntropy(Context& ctx, const SoftmaxCrossEntropySpec& s)
      : ctx_(ctx),
        s_(s),
        log_probs_(Bytes(s.batch * s.classes)),
        labels_(Bytes(s.batch)),
        losses_(Bytes(s.batch)) {
    SetNchw(desc_, "SoftmaxCrossEntropy", s.batch, s.classes, 1, 1);
  }

  double Forward(const Tensor& logits, const Tensor& labels) override {
    Check("SoftmaxCrossEntropy forward", "logits", logits, s_.batch * s_.classes);
    UploadLabels(labels);
    PHUB_CUDNN_CHECK(cudnnSoftmaxForward(ctx_.cudnn(), CUDNN_SOFTMAX_LOG,
                                         CUDNN_SOFTMAX_MODE_INSTANCE, &kOne, desc_, logits.data(),
                                         &kZero, desc_, log_probs_.get()));
    PHUB_CUDA_CHECK(LaunchNllLoss(log_probs_.as<float>(), labels_.as<float>(), losses_.as<float>(),
                                  s_.batch, s_.classes, ctx_.stream()));
    std::vector<float> losses(static_cast<std::size_t>(s_.batch));
    PHUB_CUDA_CHECK(cudaMemcpyAsync(losses.data(), losses_.get(), losses_.bytes(),
                                    cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.Synchronize();
    double loss = 0;
    for (float l : losses) loss += l;
    return loss / static_cast<double>(s_.batch);
  }

  void Backward(const Tensor& labels, Tensor& dlogits) override {
    Check("SoftmaxCrossEntropy backward", "dlogits", dlogits, s_.batch * s_.classes);
    UploadLabels(labels);
    PHUB_CUDA_CHECK(LaunchSoftmaxCrossEntropyBackward(log_probs_.as<float>(), labels_.as<float>(),
                                                      dlogits.data(), s_.batch, s_.classes,
                                                      ctx_.stream()));
  }

 private:
  static std::size_t Bytes(std::int64_t floats) {
    return static_cast<std::size_t>(floats) * sizeof(float);
  }

  // Labels are a host tensor (ops.h): checked here, before any kernel indexes with them.
  void UploadLabels(const Tensor& labels) {
    if (labels.device() != Device::kCpu || labels.numel() != s_.batch) {
      throw std::invalid_argument(absl::StrCat("SoftmaxCrossEntropy: labels is ", labels.ToString(),
                                               ", expected [", s_.batch, "] cpu"));
    }
    for (std::int64_t n = 0; n < s_.batch; ++n) {
      const float l = labels.data()[n];
      if (!(l >= 0 && l < static_cast<float>(s_.classes)) || l != std::floor(l)) {
        throw std::invalid_argument(absl::StrCat("SoftmaxCrossEntropy: label ", n, " is ", l,
                                                 ", must be a class index in [0, ", s_.classes,
                                                 ")"));
      }
    }
    // From pageable memory the copy returns once the bytes are staged: labels may change after.
    PHUB_CUDA_CHECK(cudaMemcpyAsync(labels_.get(), labels.data(), labels_.bytes(),
                                    cudaMemcpyHostToDevice, ctx_.stream()));
  }

  Context& ctx_;
  SoftmaxCrossEntropySpec s_;
  TensorDesc desc_;  // [N, K, 1, 1]: softmax over K per sample
  DeviceMemory log_probs_, labels_, losses_;
};

}  // namespace

std::unique_ptr<SoftmaxCrossEntropyOp> MakeSoftmaxCrossEntropy(
    Context& ctx, const SoftmaxCrossEntropySpec& spec) {
  Validate(spec);
  return std::make_unique<SoftmaxCrossEntropy>(ctx, spec);
}

}  // namespace phub::worker::cudnn
