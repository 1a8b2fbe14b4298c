// Softmax + cross-entropy: oneDNN's logsoftmax gives log-probabilities (stable); the loss and
// its gradient are a pass over N x K values that no library offers fused on the CPU.
#include <cmath>

#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

class SoftmaxCrossEntropy final : public SoftmaxCrossEntropyOp {
 public:
  // log_probs: [N, K] host storage.
  SoftmaxCrossEntropy(Context& ctx, const SoftmaxCrossEntropySpec& s, Tensor log_probs)
      : ctx_(ctx), s_(s), logits_({s.batch, s.classes}), log_probs_(std::move(log_probs)) {
    const auto md = PlainDesc(logits_);
    fwd_ = logsoftmax_forward(logsoftmax_forward::primitive_desc(
        logsoftmax_forward::desc(prop_kind::forward_inference, md, 1), ctx.engine));
  }

  StatusOr<double> Forward(const Tensor& logits, const Tensor& labels) override {
    PHUB_RETURN_IF_ERROR(CheckSoftmaxCrossEntropyForward(s_, Device::kCpu, logits, labels));
    PHUB_RETURN_IF_ERROR(OnednnCall("SoftmaxCrossEntropy forward", [&] {
      fwd_.execute(ctx_.stream, {{DNNL_ARG_SRC, Wrap(ctx_, logits_, logits)},
                                 {DNNL_ARG_DST, Wrap(ctx_, logits_, log_probs_)}});
      ctx_.stream.wait();
    }));
    double loss = 0;
    for (std::int64_t n = 0; n < s_.batch; ++n) {
      loss -= log_probs_.data()[n * s_.classes + static_cast<std::int64_t>(labels.data()[n])];
    }
    return loss / static_cast<double>(s_.batch);
  }

  Status Backward(const Tensor& labels, Tensor& dlogits) override {
    PHUB_RETURN_IF_ERROR(CheckSoftmaxCrossEntropyBackward(s_, Device::kCpu, labels, dlogits));
    const float inv_n = 1.0f / static_cast<float>(s_.batch);
    const float* lp = log_probs_.data();
    float* d = dlogits.data();
    for (std::int64_t i = 0; i < s_.batch * s_.classes; ++i) d[i] = std::exp(lp[i]) * inv_n;
    for (std::int64_t n = 0; n < s_.batch; ++n) {
      d[n * s_.classes + static_cast<std::int64_t>(labels.data()[n])] -= inv_n;
    }
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  SoftmaxCrossEntropySpec s_;
  dims logits_;
  Tensor log_probs_;
  logsoftmax_forward fwd_;
};

}  // namespace

StatusOr<std::unique_ptr<SoftmaxCrossEntropyOp>> MakeSoftmaxCrossEntropy(
    Context& ctx, const SoftmaxCrossEntropySpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  PHUB_ASSIGN_OR_RETURN(Tensor log_probs, Tensor::Allocate(Shape{spec.batch, spec.classes}));
  return MakeOp<SoftmaxCrossEntropyOp, SoftmaxCrossEntropy>("SoftmaxCrossEntropy", ctx, spec,
                                                            std::move(log_probs));
}

}  // namespace phub::worker::onednn
