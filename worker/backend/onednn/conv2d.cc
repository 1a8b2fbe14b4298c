// Conv2d on oneDNN: forward, backward-data and backward-weights primitives made once per spec
// with layouts left to oneDNN (format_tag::any: it picks blocked layouts for the ISA), plain
// NCHW at the edges, as PyTorch's CPU path does.
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

class Conv2d final : public Conv2dOp {
 public:
  Conv2d(Context& ctx, const Conv2dSpec& s) : ctx_(ctx), s_(s) {
    x_ = {s.batch, s.in_channels, s.height, s.width};
    w_ = {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w};
    b_ = {s.out_channels};
    y_ = {s.batch, s.out_channels, s.out_height(), s.out_width()};
    const dims strides = {s.stride_h, s.stride_w};
    const dims pad_l = {s.pad_h, s.pad_w};
    // The right/bottom padding that gives exactly out_height x out_width (floor division):
    // it can be smaller than the left padding, as in PyTorch.
    const dims pad_r = {(s.out_height() - 1) * s.stride_h + s.kernel_h - s.height - s.pad_h,
                        (s.out_width() - 1) * s.stride_w + s.kernel_w - s.width - s.pad_w};
    auto fwd_desc = s.bias ? convolution_forward::desc(
                                 prop_kind::forward_training, algorithm::convolution_direct,
                                 AnyDesc(x_), AnyDesc(w_), PlainDesc(b_), AnyDesc(y_), strides,
                                 pad_l, pad_r)
                           : convolution_forward::desc(
                                 prop_kind::forward_training, algorithm::convolution_direct,
                                 AnyDesc(x_), AnyDesc(w_), AnyDesc(y_), strides, pad_l, pad_r);
    fwd_pd_ = convolution_forward::primitive_desc(fwd_desc, ctx.engine);
    fwd_ = convolution_forward(fwd_pd_);
    bwd_data_pd_ = convolution_backward_data::primitive_desc(
        convolution_backward_data::desc(algorithm::convolution_direct, AnyDesc(x_), AnyDesc(w_),
                                        AnyDesc(y_), strides, pad_l, pad_r),
        ctx.engine, fwd_pd_);
    bwd_data_ = convolution_backward_data(bwd_data_pd_);
    auto bwd_w_desc =
        s.bias ? convolution_backward_weights::desc(algorithm::convolution_direct, AnyDesc(x_),
                                                    AnyDesc(w_), PlainDesc(b_), AnyDesc(y_),
                                                    strides, pad_l, pad_r)
               : convolution_backward_weights::desc(algorithm::convolution_direct, AnyDesc(x_),
                                                    AnyDesc(w_), AnyDesc(y_), strides, pad_l,
                                                    pad_r);
    bwd_w_pd_ = convolution_backward_weights::primitive_desc(bwd_w_desc, ctx.engine, fwd_pd_);
    bwd_w_ = convolution_backward_weights(bwd_w_pd_);

    fx_ = Staged(ctx, x_, fwd_pd_.src_desc());
    fw_ = Staged(ctx, w_, fwd_pd_.weights_desc());
    fy_ = Staged(ctx, y_, fwd_pd_.dst_desc());
    ddy_ = Staged(ctx, y_, bwd_data_pd_.diff_dst_desc());
    dw_in_ = Staged(ctx, w_, bwd_data_pd_.weights_desc());
    ddx_ = Staged(ctx, x_, bwd_data_pd_.diff_src_desc());
    wx_ = Staged(ctx, x_, bwd_w_pd_.src_desc());
    wdy_ = Staged(ctx, y_, bwd_w_pd_.diff_dst_desc());
    wdw_ = Staged(ctx, w_, bwd_w_pd_.diff_weights_desc());
  }

  Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckConv2dForward(s_, Device::kCpu, x, w, b, y));
    return OnednnCall("Conv2d forward", [&] {
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, fx_.In(ctx_, x)},
                                              {DNNL_ARG_WEIGHTS, fw_.In(ctx_, w)},
                                              {DNNL_ARG_DST, fy_.Out(ctx_, y)}};
      if (s_.bias) args[DNNL_ARG_BIAS] = Wrap(ctx_, b_, b);
      fwd_.execute(ctx_.stream, args);
      fy_.Finish(ctx_, y);
      ctx_.stream.wait();
    });
  }

  Status Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                  Tensor& db) override {
    PHUB_RETURN_IF_ERROR(CheckConv2dBackward(s_, Device::kCpu, x, w, dy, dx, dw, db));
    return OnednnCall("Conv2d backward", [&] {
      if (dx != nullptr) {
        bwd_data_.execute(ctx_.stream, {{DNNL_ARG_DIFF_DST, ddy_.In(ctx_, dy)},
                                        {DNNL_ARG_WEIGHTS, dw_in_.In(ctx_, w)},
                                        {DNNL_ARG_DIFF_SRC, ddx_.Out(ctx_, *dx)}});
        ddx_.Finish(ctx_, *dx);
      }
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wx_.In(ctx_, x)},
                                              {DNNL_ARG_DIFF_DST, wdy_.In(ctx_, dy)},
                                              {DNNL_ARG_DIFF_WEIGHTS, wdw_.Out(ctx_, dw)}};
      if (s_.bias) args[DNNL_ARG_DIFF_BIAS] = Wrap(ctx_, b_, db);
      bwd_w_.execute(ctx_.stream, args);
      wdw_.Finish(ctx_, dw);
      ctx_.stream.wait();
    });
  }

 private:
  Context& ctx_;
  Conv2dSpec s_;
  dims x_, w_, b_, y_;
  convolution_forward::primitive_desc fwd_pd_;
  convolution_forward fwd_;
  convolution_backward_data::primitive_desc bwd_data_pd_;
  convolution_backward_data bwd_data_;
  convolution_backward_weights::primitive_desc bwd_w_pd_;
  convolution_backward_weights bwd_w_;
  Staged fx_, fw_, fy_, ddy_, dw_in_, ddx_, wx_, wdy_, wdw_;
};

}  // namespace

StatusOr<std::unique_ptr<Conv2dOp>> MakeConv2d(Context& ctx, const Conv2dSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return MakeOp<Conv2dOp, Conv2d>("Conv2d", ctx, spec);
}

}  // namespace phub::worker::onednn
