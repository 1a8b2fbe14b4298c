// Across-channel LRN (AlexNet) on oneDNN: its formula, x / (k + alpha/size * sum x^2)^beta over
// a window of `size` channels centred on the channel, is PyTorch's for odd sizes.
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

class Lrn final : public LrnOp {
 public:
  Lrn(Context& ctx, const LrnSpec& s) : ctx_(ctx), s_(s) {
    x_ = {s.batch, s.channels, s.height, s.width};
    const auto md = PlainDesc(x_);
    fwd_pd_ = lrn_forward::primitive_desc(
        lrn_forward::desc(prop_kind::forward_training, algorithm::lrn_across_channels, md,
                          s.size, s.alpha, s.beta, s.k),
        ctx.engine);
    fwd_ = lrn_forward(fwd_pd_);
    bwd_ = lrn_backward(lrn_backward::primitive_desc(
        lrn_backward::desc(algorithm::lrn_across_channels, md, md, s.size, s.alpha, s.beta, s.k),
        ctx.engine, fwd_pd_));
    workspace_ = memory(fwd_pd_.workspace_desc(), ctx.engine);
  }

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckLrnForward(s_, Device::kCpu, x, y));
    return OnednnCall("LRN forward", [&] {
      fwd_.execute(ctx_.stream, {{DNNL_ARG_SRC, Wrap(ctx_, x_, x)},
                                 {DNNL_ARG_DST, Wrap(ctx_, x_, y)},
                                 {DNNL_ARG_WORKSPACE, workspace_}});
      ctx_.stream.wait();
    });
  }

  Status Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckLrnBackward(s_, Device::kCpu, x, y, dy, dx));
    return OnednnCall("LRN backward", [&] {
      bwd_.execute(ctx_.stream, {{DNNL_ARG_SRC, Wrap(ctx_, x_, x)},
                                 {DNNL_ARG_DIFF_DST, Wrap(ctx_, x_, dy)},
                                 {DNNL_ARG_DIFF_SRC, Wrap(ctx_, x_, dx)},
                                 {DNNL_ARG_WORKSPACE, workspace_}});
      ctx_.stream.wait();
    });
  }

 private:
  Context& ctx_;
  LrnSpec s_;
  dims x_;
  lrn_forward::primitive_desc fwd_pd_;
  lrn_forward fwd_;
  lrn_backward bwd_;
  memory workspace_;
};

}  // namespace

StatusOr<std::unique_ptr<LrnOp>> MakeLrn(Context& ctx, const LrnSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return MakeOp<LrnOp, Lrn>("LocalResponseNorm", ctx, spec);
}

}  // namespace phub::worker::onednn
