// Max and average pooling on cuDNN. Average pooling excludes the padding from the count
// (ops.h). cuDNN's max-pooling backward finds each window's maximum again from x and y and
// sends the gradient to one position holding it; ops.h wants the first, which the test
// MaxPoolTiesSendTheGradientToTheFirstMaximum checks on the GPU. The deterministic mode is
// asked for because overlapping windows (AlexNet's 3x3, stride 2) otherwise sum their
// gradients with atomics, in an order that changes from run to run.
#include "worker/backend/cudnn/cudnn_ops.h"

namespace phub::worker::cudnn {
namespace {

class Pool final : public PoolOp {
 public:
  Pool(Context& ctx, const PoolSpec& s) : ctx_(ctx), s_(s) {}

  Status Init() {
    const char* op = "Pool";
    PHUB_RETURN_IF_ERROR(SetNchw(x_desc_, op, s_.batch, s_.channels, s_.height, s_.width));
    PHUB_RETURN_IF_ERROR(
        SetNchw(y_desc_, op, s_.batch, s_.channels, s_.out_height(), s_.out_width()));
    PHUB_ASSIGN_OR_RETURN(const int kernel_h, ToInt(op, "kernel_h", s_.kernel_h));
    PHUB_ASSIGN_OR_RETURN(const int kernel_w, ToInt(op, "kernel_w", s_.kernel_w));
    PHUB_ASSIGN_OR_RETURN(const int pad_h, ToInt(op, "pad_h", s_.pad_h));
    PHUB_ASSIGN_OR_RETURN(const int pad_w, ToInt(op, "pad_w", s_.pad_w));
    PHUB_ASSIGN_OR_RETURN(const int stride_h, ToInt(op, "stride_h", s_.stride_h));
    PHUB_ASSIGN_OR_RETURN(const int stride_w, ToInt(op, "stride_w", s_.stride_w));
    PHUB_RETURN_IF_ERROR(pool_.Init());
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetPooling2dDescriptor(
        pool_,
        s_.kind == PoolKind::kMax ? CUDNN_POOLING_MAX_DETERMINISTIC
                                  : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
        CUDNN_PROPAGATE_NAN, kernel_h, kernel_w, pad_h, pad_w, stride_h, stride_w));
    return absl::OkStatus();
  }

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckPoolForward(s_, Device::kCuda, x, y));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnPoolingForward(ctx_.cudnn(), pool_, &kOne, x_desc_, x.data(),
                                                   &kZero, y_desc_, y.data()));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckPoolBackward(s_, Device::kCuda, x, y, dy, dx));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnPoolingBackward(ctx_.cudnn(), pool_, &kOne, y_desc_, y.data(),
                                                    y_desc_, dy.data(), x_desc_, x.data(), &kZero,
                                                    x_desc_, dx.data()));
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  PoolSpec s_;
  TensorDesc x_desc_, y_desc_;
  PoolingDesc pool_;
};

}  // namespace

StatusOr<std::unique_ptr<PoolOp>> MakePool(Context& ctx, const PoolSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  auto op = std::make_unique<Pool>(ctx, spec);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
