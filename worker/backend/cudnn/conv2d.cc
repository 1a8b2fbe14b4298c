// Conv2d on cuDNN: forward, backward-data and backward-filter with the algorithms measured once
// per shape (conv_algorithms.h), the bias added and its gradient summed by cuDNN too. Each
// direction has its own convolution descriptor because cuDNN runs an algorithm with the math
// type it was measured with. The workspace is the context's, reserved here for the largest of
// the three so that no step ever allocates.
#include <algorithm>

#include "worker/backend/cudnn/conv_algorithms.h"
#include "worker/backend/cudnn/cudnn_ops.h"

namespace phub::worker::cudnn {
namespace {

class Conv2d final : public Conv2dOp {
 public:
  Conv2d(Context& ctx, const Conv2dSpec& s)
      : ctx_(ctx), s_(s), d_(s, ctx.math_type()), algos_(FindConvAlgorithms(ctx, s)) {
    SetConvolution(fwd_conv_, s, algos_.forward.math);
    SetConvolution(data_conv_, s, algos_.backward_data.math);
    SetConvolution(filter_conv_, s, algos_.backward_filter.math);
    SetNchw(b_, "Conv2d", 1, s.out_channels, 1, 1);
    workspace_ = std::max({algos_.forward.workspace, algos_.backward_data.workspace,
                           algos_.backward_filter.workspace});
    ctx.Workspace(workspace_);
    x_ = s.batch * s.in_channels * s.height * s.width;
    w_ = s.out_channels * s.in_channels * s.kernel_h * s.kernel_w;
    y_ = s.batch * s.out_channels * s.out_height() * s.out_width();
  }

  void Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    const char* op = "Conv2d forward";
    Check(op, "x", x, x_);
    Check(op, "w", w, w_);
    Check(op, "y", y, y_);
    if (s_.bias) Check(op, "b", b, s_.out_channels);
    void* ws = ctx_.Workspace(workspace_);
    PHUB_CUDNN_CHECK(
        cudnnConvolutionForward(ctx_.cudnn(), &kOne, d_.x, x.data(), d_.w, w.data(), fwd_conv_,
                                static_cast<cudnnConvolutionFwdAlgo_t>(algos_.forward.algo), ws,
                                workspace_, &kZero, d_.y, y.data()));
    if (s_.bias) {
      PHUB_CUDNN_CHECK(cudnnAddTensor(ctx_.cudnn(), &kOne, b_, b.data(), &kOne, d_.y, y.data()));
    }
  }

  void Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor& db) override {
    const char* op = "Conv2d backward";
    Check(op, "x", x, x_);
    Check(op, "dy", dy, y_);
    Check(op, "dw", dw, w_);
    if (s_.bias) Check(op, "db", db, s_.out_channels);
    void* ws = ctx_.Workspace(workspace_);
    if (dx != nullptr) {
      Check(op, "w", w, w_);
      Check(op, "dx", *dx, x_);
      PHUB_CUDNN_CHECK(cudnnConvolutionBackwardData(
          ctx_.cudnn(), &kOne, d_.w, w.data(), d_.y, dy.data(), data_conv_,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algos_.backward_data.algo), ws, workspace_,
          &kZero, d_.x, dx->data()));
    }
    PHUB_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        ctx_.cudnn(), &kOne, d_.x, x.data(), d_.y, dy.data(), filter_conv_,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algos_.backward_filter.algo), ws, workspace_,
        &kZero, d_.w, dw.data()));
    if (s_.bias) {
      PHUB_CUDNN_CHECK(cudnnConvolutionBackwardBias(ctx_.cudnn(), &kOne, d_.y, dy.data(), &kZero,
                                                    b_, db.data()));
    }
  }

 private:
  Context& ctx_;
  Conv2dSpec s_;
  ConvDescriptors d_;
  ConvAlgorithms algos_;
  ConvolutionDesc fwd_conv_, data_conv_, filter_conv_;
  TensorDesc b_;
  std::size_t workspace_ = 0;
  std::int64_t x_ = 0, w_ = 0, y_ = 0;  // element counts
};

}  // namespace

std::unique_ptr<Conv2dOp> MakeConv2d(Context& ctx, const Conv2dSpec& spec) {
  Validate(spec);
  return std::make_unique<Conv2d>(ctx, spec);
}

}  // namespace phub::worker::cudnn
