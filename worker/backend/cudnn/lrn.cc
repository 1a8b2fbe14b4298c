// Across-channel LRN on cuDNN. Its formula divides alpha by the window size and centres the
// window for odd sizes, as PyTorch's LocalResponseNorm does (ops.h). cuDNN takes only a window
// of 1 to 16 channels, k >= 1e-5 and beta >= 0.01: other specs are refused when made, naming
// the field (AlexNet's 5, 2, 0.75 are well inside).
#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_ops.h"

namespace phub::worker::cudnn {
namespace {

Status CheckCudnnLimits(const LrnSpec& s) {
  const char* op = "LocalResponseNorm (cuDNN)";
  if (s.size > CUDNN_LRN_MAX_N) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": size = ", s.size, ", cuDNN takes at most ", CUDNN_LRN_MAX_N));
  }
  if (s.k < CUDNN_LRN_MIN_K) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": k = ", s.k, ", cuDNN takes k >= ", CUDNN_LRN_MIN_K));
  }
  if (s.beta < CUDNN_LRN_MIN_BETA) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": beta = ", s.beta, ", cuDNN takes beta >= ", CUDNN_LRN_MIN_BETA));
  }
  return absl::OkStatus();
}

class Lrn final : public LrnOp {
 public:
  Lrn(Context& ctx, const LrnSpec& s) : ctx_(ctx), s_(s) {}

  Status Init() {
    PHUB_RETURN_IF_ERROR(
        SetNchw(desc_, "LocalResponseNorm", s_.batch, s_.channels, s_.height, s_.width));
    PHUB_RETURN_IF_ERROR(lrn_.Init());
    PHUB_RETURN_IF_CUDNN_ERROR(
        cudnnSetLRNDescriptor(lrn_, static_cast<unsigned>(s_.size), s_.alpha, s_.beta, s_.k));
    return absl::OkStatus();
  }

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckLrnForward(s_, Device::kCuda, x, y));
    PHUB_RETURN_IF_CUDNN_ERROR(
        cudnnLRNCrossChannelForward(ctx_.cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, desc_,
                                    x.data(), &kZero, desc_, y.data()));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckLrnBackward(s_, Device::kCuda, x, y, dy, dx));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnLRNCrossChannelBackward(
        ctx_.cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1, &kOne, desc_, y.data(), desc_, dy.data(),
        desc_, x.data(), &kZero, desc_, dx.data()));
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  LrnSpec s_;
  TensorDesc desc_;
  LrnDesc lrn_;
};

}  // namespace

StatusOr<std::unique_ptr<LrnOp>> MakeLrn(Context& ctx, const LrnSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  PHUB_RETURN_IF_ERROR(CheckCudnnLimits(spec));
  auto op = std::make_unique<Lrn>(ctx, spec);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
