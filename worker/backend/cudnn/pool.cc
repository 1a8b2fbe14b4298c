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
  Pool(Context& ctx, const PoolSpec& s) : ctx_(ctx) {
    const char* op = "Pool";
    SetNchw(x_desc_, op, s.batch, s.channels, s.height, s.width);
    SetNchw(y_desc_, op, s.batch, s.channels, s.out_height(), s.out_width());
    PHUB_CUDNN_CHECK(cudnnSetPooling2dDescriptor(
        pool_,
        s.kind == PoolKind::kMax ? CUDNN_POOLING_MAX_DETERMINISTIC
                                 : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING,
        CUDNN_PROPAGATE_NAN, ToInt(op, "kernel_h", s.kernel_h), ToInt(op, "kernel_w", s.kernel_w),
        ToInt(op, "pad_h", s.pad_h), ToInt(op, "pad_w", s.pad_w), ToInt(op, "stride_h", s.stride_h),
        ToInt(op, "stride_w", s.stride_w)));
    x_ = s.batch * s.channels * s.height * s.width;
    y_ = s.batch * s.channels * s.out_height() * s.out_width();
  }

  void Forward(const Tensor& x, Tensor& y) override {
    Check("Pool forward", "x", x, x_);
    Check("Pool forward", "y", y, y_);
    PHUB_CUDNN_CHECK(cudnnPoolingForward(ctx_.cudnn(), pool_, &kOne, x_desc_, x.data(), &kZero,
                                         y_desc_, y.data()));
  }

  void Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    Check("Pool backward", "x", x, x_);
    Check("Pool backward", "y", y, y_);
    Check("Pool backward", "dy", dy, y_);
    Check("Pool backward", "dx", dx, x_);
    PHUB_CUDNN_CHECK(cudnnPoolingBackward(ctx_.cudnn(), pool_, &kOne, y_desc_, y.data(), y_desc_,
                                          dy.data(), x_desc_, x.data(), &kZero, x_desc_,
                                          dx.data()));
  }

 private:
  Context& ctx_;
  TensorDesc x_desc_, y_desc_;
  PoolingDesc pool_;
  std::int64_t x_ = 0, y_ = 0;
};

}  // namespace

std::unique_ptr<PoolOp> MakePool(Context& ctx, const PoolSpec& spec) {
  Validate(spec);
  return std::make_unique<Pool>(ctx, spec);
}

}  // namespace phub::worker::cudnn
