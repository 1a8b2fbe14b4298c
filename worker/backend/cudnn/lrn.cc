// Across-channel LRN on cuDNN. Its formula divides alpha by the window size and centres the
// window for odd sizes, as PyTorch's LocalResponseNorm does (ops.h). cuDNN takes only a window
// of 1 to 16 channels, k >= 1e-5 and beta >= 0.01: other specs are refused when made, naming
// the field (AlexNet's 5, 2, 0.75 are well inside).
#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_ops.h"

namespace phub::worker::cudnn {
namespace {

void CheckCudnnLimits(const LrnSpec& s) {
  const char* op = "LocalResponseNorm (cuDNN)";
  if (s.size > CUDNN_LRN_MAX_N) {
    throw std::invalid_argument(
        absl::StrCat(op, ": size = ", s.size, ", cuDNN takes at most ", CUDNN_LRN_MAX_N));
  }
  if (s.k < CUDNN_LRN_MIN_K) {
    throw std::invalid_argument(
        absl::StrCat(op, ": k = ", s.k, ", cuDNN takes k >= ", CUDNN_LRN_MIN_K));
  }
  if (s.beta < CUDNN_LRN_MIN_BETA) {
    throw std::invalid_argument(
        absl::StrCat(op, ": beta = ", s.beta, ", cuDNN takes beta >= ", CUDNN_LRN_MIN_BETA));
  }
}

class Lrn final : public LrnOp {
 public:
  Lrn(Context& ctx, const LrnSpec& s) : ctx_(ctx), n_(s.batch * s.channels * s.height * s.width) {
    SetNchw(desc_, "LocalResponseNorm", s.batch, s.channels, s.height, s.width);
    PHUB_CUDNN_CHECK(
        cudnnSetLRNDescriptor(lrn_, static_cast<unsigned>(s.size), s.alpha, s.beta, s.k));
  }

  void Forward(const Tensor& x, Tensor& y) override {
    Check("LRN forward", "x", x, n_);
    Check("LRN forward", "y", y, n_);
    PHUB_CUDNN_CHECK(cudnnLRNCrossChannelForward(ctx_.cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1,
                                                 &kOne, desc_, x.data(), &kZero, desc_, y.data()));
  }

  void Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    Check("LRN backward", "x", x, n_);
    Check("LRN backward", "y", y, n_);
    Check("LRN backward", "dy", dy, n_);
    Check("LRN backward", "dx", dx, n_);
    PHUB_CUDNN_CHECK(cudnnLRNCrossChannelBackward(ctx_.cudnn(), lrn_, CUDNN_LRN_CROSS_CHANNEL_DIM1,
                                                  &kOne, desc_, y.data(), desc_, dy.data(), desc_,
                                                  x.data(), &kZero, desc_, dx.data()));
  }

 private:
  Context& ctx_;
  std::int64_t n_;
  TensorDesc desc_;
  LrnDesc lrn_;
};

}  // namespace

std::unique_ptr<LrnOp> MakeLrn(Context& ctx, const LrnSpec& spec) {
  Validate(spec);
  CheckCudnnLimits(spec);
  return std::make_unique<Lrn>(ctx, spec);
}

}  // namespace phub::worker::cudnn
