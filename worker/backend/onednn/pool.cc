// Max and average pooling on oneDNN, on plain NCHW (pooling reads each element about once:
// a reorder to a blocked layout would cost what it saves; oneDNN also wants a defined source
// layout here). Max pooling's training forward fills a workspace (where
// each window's maximum was) that the backward reads; the op keeps it between the two.
#include <algorithm>

#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

class Pool final : public PoolOp {
 public:
  Pool(Context& ctx, const PoolSpec& s) : ctx_(ctx), s_(s) {
    x_ = {s.batch, s.channels, s.height, s.width};
    y_ = {s.batch, s.channels, s.out_height(), s.out_width()};
    const dims strides = {s.stride_h, s.stride_w}, kernel = {s.kernel_h, s.kernel_w};
    const dims pad_l = {s.pad_h, s.pad_w};
    // Right/bottom padding for exactly out_height x out_width. Floor division can make the
    // exact value negative (the last rows are never read); oneDNN's pooling refuses negative
    // padding, and 0 gives the same windows then.
    const dims pad_r = {
        std::max<std::int64_t>(0, (s.out_height() - 1) * s.stride_h + s.kernel_h - s.height - s.pad_h),
        std::max<std::int64_t>(0, (s.out_width() - 1) * s.stride_w + s.kernel_w - s.width - s.pad_w)};
    const auto alg = s.kind == PoolKind::kMax ? algorithm::pooling_max
                                              : algorithm::pooling_avg_exclude_padding;
    fwd_pd_ = pooling_forward::primitive_desc(
        pooling_forward::desc(prop_kind::forward_training, alg, PlainDesc(x_), PlainDesc(y_), strides,
                              kernel, pad_l, pad_r),
        ctx.engine);
    fwd_ = pooling_forward(fwd_pd_);
    bwd_pd_ = pooling_backward::primitive_desc(
        pooling_backward::desc(alg, PlainDesc(x_), PlainDesc(y_), strides, kernel, pad_l, pad_r),
        ctx.engine, fwd_pd_);
    bwd_ = pooling_backward(bwd_pd_);
    if (s.kind == PoolKind::kMax) workspace_ = memory(fwd_pd_.workspace_desc(), ctx.engine);
  }

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckPoolForward(s_, Device::kCpu, x, y));
    return OnednnCall("Pool forward", [&] {
      std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, Wrap(ctx_, x_, x)},
                                              {DNNL_ARG_DST, Wrap(ctx_, y_, y)}};
      if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
      fwd_.execute(ctx_.stream, args);
      ctx_.stream.wait();
    });
  }

  Status Backward(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckPoolBackward(s_, Device::kCpu, x, y, dy, dx));
    return OnednnCall("Pool backward", [&] {
      std::unordered_map<int, memory> args = {{DNNL_ARG_DIFF_DST, Wrap(ctx_, y_, dy)},
                                              {DNNL_ARG_DIFF_SRC, Wrap(ctx_, x_, dx)}};
      if (workspace_) args[DNNL_ARG_WORKSPACE] = workspace_;
      bwd_.execute(ctx_.stream, args);
      ctx_.stream.wait();
    });
  }

 private:
  Context& ctx_;
  PoolSpec s_;
  dims x_, y_;
  pooling_forward::primitive_desc fwd_pd_;
  pooling_forward fwd_;
  pooling_backward::primitive_desc bwd_pd_;
  pooling_backward bwd_;
  memory workspace_;
};

}  // namespace

StatusOr<std::unique_ptr<PoolOp>> MakePool(Context& ctx, const PoolSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return MakeOp<PoolOp, Pool>("Pool", ctx, spec);
}

}  // namespace phub::worker::onednn
