// ReLU and sigmoid on oneDNN's eltwise, seen as one flat array. The backward reads y (the
// "use dst" algorithms), so x need not be kept and the forward may run in place.
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

class Activation final : public ActivationOp {
 public:
  Activation(Context& ctx, ActivationKind kind, const Shape& shape)
      : ctx_(ctx), shape_(shape), flat_({shape.numel()}) {
    const auto md = PlainDesc(flat_);
    const auto alg = kind == ActivationKind::kRelu ? algorithm::eltwise_relu_use_dst_for_bwd
                                                   : algorithm::eltwise_logistic_use_dst_for_bwd;
    fwd_pd_ = eltwise_forward::primitive_desc(
        eltwise_forward::desc(prop_kind::forward_training,
                              alg, md, 0.0f, 0.0f),
        ctx.engine);
    fwd_ = eltwise_forward(fwd_pd_);
    bwd_ = eltwise_backward(eltwise_backward::primitive_desc(
        eltwise_backward::desc(alg, md, md, 0.0f, 0.0f),
        ctx.engine, fwd_pd_));
  }

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckActivationForward(shape_, Device::kCpu, x, y));
    return OnednnCall("activation forward", [&] {
      fwd_.execute(ctx_.stream,
                   {{DNNL_ARG_SRC, Wrap(ctx_, flat_, x)}, {DNNL_ARG_DST, Wrap(ctx_, flat_, y)}});
      ctx_.stream.wait();
    });
  }

  Status Backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckActivationBackward(shape_, Device::kCpu, y, dy, dx));
    return OnednnCall("activation backward", [&] {
      bwd_.execute(ctx_.stream, {{DNNL_ARG_DST, Wrap(ctx_, flat_, y)},
                                 {DNNL_ARG_DIFF_DST, Wrap(ctx_, flat_, dy)},
                                 {DNNL_ARG_DIFF_SRC, Wrap(ctx_, flat_, dx)}});
      ctx_.stream.wait();
    });
  }

 private:
  Context& ctx_;
  Shape shape_;
  dims flat_;
  eltwise_forward::primitive_desc fwd_pd_;
  eltwise_forward fwd_;
  eltwise_backward bwd_;
};

}  // namespace

StatusOr<std::unique_ptr<ActivationOp>> MakeActivation(Context& ctx, ActivationKind kind,
                                                       const Shape& shape) {
  PHUB_RETURN_IF_ERROR(ValidateActivation(shape));
  return MakeOp<ActivationOp, Activation>("activation", ctx, kind, shape);
}

}  // namespace phub::worker::onednn
