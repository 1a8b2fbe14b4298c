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
  Conv2d(Context& ctx, const Conv2dSpec& s) : ctx_(ctx), s_(s) {}

  // The descriptors, the algorithms (measured once per shape) and the workspace they need.
  Status Init() {
    PHUB_RETURN_IF_ERROR(d_.Init(s_, ctx_.math_type()));
    PHUB_ASSIGN_OR_RETURN(algos_, FindConvAlgorithms(ctx_, s_));
    PHUB_RETURN_IF_ERROR(SetConvolution(fwd_conv_, s_, algos_.forward.math));
    PHUB_RETURN_IF_ERROR(SetConvolution(data_conv_, s_, algos_.backward_data.math));
    PHUB_RETURN_IF_ERROR(SetConvolution(filter_conv_, s_, algos_.backward_filter.math));
    PHUB_RETURN_IF_ERROR(SetNchw(b_, "Conv2d", 1, s_.out_channels, 1, 1));
    workspace_ = std::max({algos_.forward.workspace, algos_.backward_data.workspace,
                           algos_.backward_filter.workspace});
    return ctx_.Workspace(workspace_).status();
  }

  Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckConv2dForward(s_, Device::kCuda, x, w, b, y));
    PHUB_ASSIGN_OR_RETURN(void* ws, ctx_.Workspace(workspace_));
    PHUB_RETURN_IF_CUDNN_ERROR(
        cudnnConvolutionForward(ctx_.cudnn(), &kOne, d_.x, x.data(), d_.w, w.data(), fwd_conv_,
                                static_cast<cudnnConvolutionFwdAlgo_t>(algos_.forward.algo), ws,
                                workspace_, &kZero, d_.y, y.data()));
    if (s_.bias) {
      PHUB_RETURN_IF_CUDNN_ERROR(
          cudnnAddTensor(ctx_.cudnn(), &kOne, b_, b.data(), &kOne, d_.y, y.data()));
    }
    return absl::OkStatus();
  }

  Status Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                  Tensor& db) override {
    PHUB_RETURN_IF_ERROR(CheckConv2dBackward(s_, Device::kCuda, x, w, dy, dx, dw, db));
    PHUB_ASSIGN_OR_RETURN(void* ws, ctx_.Workspace(workspace_));
    if (dx != nullptr) {
      PHUB_RETURN_IF_CUDNN_ERROR(cudnnConvolutionBackwardData(
          ctx_.cudnn(), &kOne, d_.w, w.data(), d_.y, dy.data(), data_conv_,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(algos_.backward_data.algo), ws, workspace_,
          &kZero, d_.x, dx->data()));
    }
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnConvolutionBackwardFilter(
        ctx_.cudnn(), &kOne, d_.x, x.data(), d_.y, dy.data(), filter_conv_,
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algos_.backward_filter.algo), ws, workspace_,
        &kZero, d_.w, dw.data()));
    if (s_.bias) {
      PHUB_RETURN_IF_CUDNN_ERROR(cudnnConvolutionBackwardBias(ctx_.cudnn(), &kOne, d_.y, dy.data(),
                                                              &kZero, b_, db.data()));
    }
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  Conv2dSpec s_;
  ConvDescriptors d_;
  ConvAlgorithms algos_;
  ConvolutionDesc fwd_conv_, data_conv_, filter_conv_;
  TensorDesc b_;
  std::size_t workspace_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Conv2dOp>> MakeConv2d(Context& ctx, const Conv2dSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  auto op = std::make_unique<Conv2d>(ctx, spec);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
