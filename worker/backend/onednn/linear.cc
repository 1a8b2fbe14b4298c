// Linear (fully connected) on oneDNN's inner product: y = x W^T + b, x [N, In], W [Out, In].
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

class Linear final : public LinearOp {
 public:
  Linear(Context& ctx, const LinearSpec& s) : ctx_(ctx), s_(s) {
    x_ = {s.batch, s.in_features};
    w_ = {s.out_features, s.in_features};
    b_ = {s.out_features};
    y_ = {s.batch, s.out_features};
    auto fwd_desc = s.bias ? inner_product_forward::desc(prop_kind::forward_training,
                                                         AnyDesc(x_), AnyDesc(w_), PlainDesc(b_),
                                                         PlainDesc(y_))
                           : inner_product_forward::desc(prop_kind::forward_training,
                                                         AnyDesc(x_), AnyDesc(w_), PlainDesc(y_));
    fwd_pd_ = inner_product_forward::primitive_desc(fwd_desc, ctx.engine);
    fwd_ = inner_product_forward(fwd_pd_);
    bwd_data_pd_ = inner_product_backward_data::primitive_desc(
        inner_product_backward_data::desc(AnyDesc(x_), AnyDesc(w_), PlainDesc(y_)), ctx.engine,
        fwd_pd_);
    bwd_data_ = inner_product_backward_data(bwd_data_pd_);
    auto bwd_w_desc = s.bias ? inner_product_backward_weights::desc(
                                   AnyDesc(x_), AnyDesc(w_), PlainDesc(b_), PlainDesc(y_))
                             : inner_product_backward_weights::desc(AnyDesc(x_), AnyDesc(w_),
                                                                    PlainDesc(y_));
    bwd_w_pd_ = inner_product_backward_weights::primitive_desc(bwd_w_desc, ctx.engine, fwd_pd_);
    bwd_w_ = inner_product_backward_weights(bwd_w_pd_);
    fx_ = Staged(ctx, x_, fwd_pd_.src_desc());
    fw_ = Staged(ctx, w_, fwd_pd_.weights_desc());
    dw_in_ = Staged(ctx, w_, bwd_data_pd_.weights_desc());
    ddx_ = Staged(ctx, x_, bwd_data_pd_.diff_src_desc());
    wx_ = Staged(ctx, x_, bwd_w_pd_.src_desc());
    wdw_ = Staged(ctx, w_, bwd_w_pd_.diff_weights_desc());
  }

  Status Forward(const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckLinearForward(s_, Device::kCpu, x, w, b, y));
    return OnednnCall("Linear forward", [&] {
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, fx_.In(ctx_, x)},
                                              {DNNL_ARG_WEIGHTS, fw_.In(ctx_, w)},
                                              {DNNL_ARG_DST, Wrap(ctx_, y_, y)}};
      if (s_.bias) args[DNNL_ARG_BIAS] = Wrap(ctx_, b_, b);
      fwd_.execute(ctx_.stream, args);
      ctx_.stream.wait();
    });
  }

  Status Backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                  Tensor& db) override {
    PHUB_RETURN_IF_ERROR(CheckLinearBackward(s_, Device::kCpu, x, w, dy, dx, dw, db));
    return OnednnCall("Linear backward", [&] {
      memory dy_mem = Wrap(ctx_, y_, dy);
      if (dx != nullptr) {
        bwd_data_.execute(ctx_.stream, {{DNNL_ARG_DIFF_DST, dy_mem},
                                        {DNNL_ARG_WEIGHTS, dw_in_.In(ctx_, w)},
                                        {DNNL_ARG_DIFF_SRC, ddx_.Out(ctx_, *dx)}});
        ddx_.Finish(ctx_, *dx);
      }
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wx_.In(ctx_, x)},
                                              {DNNL_ARG_DIFF_DST, dy_mem},
                                              {DNNL_ARG_DIFF_WEIGHTS, wdw_.Out(ctx_, dw)}};
      if (s_.bias) args[DNNL_ARG_DIFF_BIAS] = Wrap(ctx_, b_, db);
      bwd_w_.execute(ctx_.stream, args);
      wdw_.Finish(ctx_, dw);
      ctx_.stream.wait();
    });
  }

 private:
  Context& ctx_;
  LinearSpec s_;
  dims x_, w_, b_, y_;
  inner_product_forward::primitive_desc fwd_pd_;
  inner_product_forward fwd_;
  inner_product_backward_data::primitive_desc bwd_data_pd_;
  inner_product_backward_data bwd_data_;
  inner_product_backward_weights::primitive_desc bwd_w_pd_;
  inner_product_backward_weights bwd_w_;
  Staged fx_, fw_, dw_in_, ddx_, wx_, wdw_;
};

}  // namespace

StatusOr<std::unique_ptr<LinearOp>> MakeLinear(Context& ctx, const LinearSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return MakeOp<LinearOp, Linear>("Linear", ctx, spec);
}

}  // namespace phub::worker::onednn
