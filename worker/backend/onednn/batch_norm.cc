// BatchNorm on oneDNN's batch_normalization with separate scale and shift. oneDNN computes the
// batch statistics (biased variance) and the backward; the running-stat update, which oneDNN
// leaves to the framework, is the short loop below (PyTorch's rule, unbiased variance).
#include <algorithm>

#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

using namespace dnnl;

class BatchNorm final : public BatchNormOp {
 public:
  // unused_shift: [C] zeros (see the member).
  BatchNorm(Context& ctx, const BatchNormSpec& s, Tensor unused_shift)
      : ctx_(ctx), s_(s), unused_shift_(std::move(unused_shift)) {
    x_ = {s.batch, s.channels, s.height, s.width};
    c_ = {s.channels};
    const auto md = PlainDesc(x_);
    const auto flags = normalization_flags::use_scale | normalization_flags::use_shift;
    train_pd_ = batch_normalization_forward::primitive_desc(
        batch_normalization_forward::desc(prop_kind::forward_training, md, s.eps, flags),
        ctx.engine);
    train_ = batch_normalization_forward(train_pd_);
    infer_pd_ = batch_normalization_forward::primitive_desc(
        batch_normalization_forward::desc(prop_kind::forward_inference, md, s.eps,
                                          flags | normalization_flags::use_global_stats),
        ctx.engine);
    infer_ = batch_normalization_forward(infer_pd_);
    bwd_pd_ = batch_normalization_backward::primitive_desc(
        batch_normalization_backward::desc(prop_kind::backward, md, md, s.eps, flags),
        ctx.engine, train_pd_);
    bwd_ = batch_normalization_backward(bwd_pd_);
  }

  Status ForwardTraining(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                         Tensor& save_mean, Tensor& save_var, Tensor& running_mean,
                         Tensor& running_var) override {
    const char* op = "BatchNorm forward (training)";
    PHUB_RETURN_IF_ERROR(Check(op, "x", x, x_));
    PHUB_RETURN_IF_ERROR(Check(op, "y", y, x_));
    for (auto [name, t] : {std::pair<const char*, const Tensor*>{"gamma", &gamma},
                           {"beta", &beta}, {"save_mean", &save_mean}, {"save_var", &save_var},
                           {"running_mean", &running_mean}, {"running_var", &running_var}}) {
      PHUB_RETURN_IF_ERROR(Check(op, name, *t, c_));
    }
    PHUB_RETURN_IF_ERROR(OnednnCall(op, [&] {
      train_.execute(ctx_.stream, {{DNNL_ARG_SRC, Wrap(ctx_, x_, x)},
                                   {DNNL_ARG_SCALE, Wrap(ctx_, c_, gamma)},
                                   {DNNL_ARG_SHIFT, Wrap(ctx_, c_, beta)},
                                   {DNNL_ARG_MEAN, Wrap(ctx_, c_, save_mean)},
                                   {DNNL_ARG_VARIANCE, Wrap(ctx_, c_, save_var)},
                                   {DNNL_ARG_DST, Wrap(ctx_, x_, y)}});
      ctx_.stream.wait();
    }));
    const double m = static_cast<double>(s_.batch * s_.height * s_.width);
    const float unbias = m > 1 ? static_cast<float>(m / (m - 1)) : 1.0f;
    const float mom = s_.momentum;
    for (std::int64_t c = 0; c < s_.channels; ++c) {
      running_mean.data()[c] = (1 - mom) * running_mean.data()[c] + mom * save_mean.data()[c];
      running_var.data()[c] =
          (1 - mom) * running_var.data()[c] + mom * save_var.data()[c] * unbias;
    }
    return absl::OkStatus();
  }

  Status ForwardInference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          const Tensor& running_mean, const Tensor& running_var,
                          Tensor& y) override {
    const char* op = "BatchNorm forward (inference)";
    PHUB_RETURN_IF_ERROR(Check(op, "x", x, x_));
    PHUB_RETURN_IF_ERROR(Check(op, "y", y, x_));
    for (auto [name, t] : {std::pair<const char*, const Tensor*>{"gamma", &gamma},
                           {"beta", &beta},
                           {"running_mean", &running_mean},
                           {"running_var", &running_var}}) {
      PHUB_RETURN_IF_ERROR(Check(op, name, *t, c_));
    }
    return OnednnCall(op, [&] {
      infer_.execute(ctx_.stream, {{DNNL_ARG_SRC, Wrap(ctx_, x_, x)},
                                   {DNNL_ARG_SCALE, Wrap(ctx_, c_, gamma)},
                                   {DNNL_ARG_SHIFT, Wrap(ctx_, c_, beta)},
                                   {DNNL_ARG_MEAN, Wrap(ctx_, c_, running_mean)},
                                   {DNNL_ARG_VARIANCE, Wrap(ctx_, c_, running_var)},
                                   {DNNL_ARG_DST, Wrap(ctx_, x_, y)}});
      ctx_.stream.wait();
    });
  }

  Status Backward(const Tensor& x, const Tensor& gamma, const Tensor& save_mean,
                  const Tensor& save_var, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                  Tensor& dbeta) override {
    const char* op = "BatchNorm backward";
    PHUB_RETURN_IF_ERROR(Check(op, "x", x, x_));
    PHUB_RETURN_IF_ERROR(Check(op, "dy", dy, x_));
    PHUB_RETURN_IF_ERROR(Check(op, "dx", dx, x_));
    for (auto [name, t] : {std::pair<const char*, const Tensor*>{"gamma", &gamma},
                           {"save_mean", &save_mean},
                           {"save_var", &save_var},
                           {"dgamma", &dgamma},
                           {"dbeta", &dbeta}}) {
      PHUB_RETURN_IF_ERROR(Check(op, name, *t, c_));
    }
    return OnednnCall(op, [&] {
      bwd_.execute(ctx_.stream, {{DNNL_ARG_SRC, Wrap(ctx_, x_, x)},
                                 {DNNL_ARG_DIFF_DST, Wrap(ctx_, x_, dy)},
                                 {DNNL_ARG_SCALE, Wrap(ctx_, c_, gamma)},
                                 {DNNL_ARG_SHIFT, Wrap(ctx_, c_, unused_shift_)},
                                 {DNNL_ARG_MEAN, Wrap(ctx_, c_, save_mean)},
                                 {DNNL_ARG_VARIANCE, Wrap(ctx_, c_, save_var)},
                                 {DNNL_ARG_DIFF_SRC, Wrap(ctx_, x_, dx)},
                                 {DNNL_ARG_DIFF_SCALE, Wrap(ctx_, c_, dgamma)},
                                 {DNNL_ARG_DIFF_SHIFT, Wrap(ctx_, c_, dbeta)}});
      ctx_.stream.wait();
    });
  }

 private:
  Context& ctx_;
  BatchNormSpec s_;
  dims x_, c_;
  batch_normalization_forward::primitive_desc train_pd_, infer_pd_;
  batch_normalization_forward train_, infer_;
  batch_normalization_backward::primitive_desc bwd_pd_;
  batch_normalization_backward bwd_;
  // oneDNN 2.6's backward asks for the shift although dx, dgamma and dbeta do not depend on it.
  Tensor unused_shift_;
};

}  // namespace

StatusOr<std::unique_ptr<BatchNormOp>> MakeBatchNorm(Context& ctx, const BatchNormSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  PHUB_ASSIGN_OR_RETURN(Tensor unused_shift, Tensor::Allocate(Shape{spec.channels}));
  std::fill_n(unused_shift.data(), unused_shift.numel(), 0.0f);
  return MakeOp<BatchNormOp, BatchNorm>("BatchNorm", ctx, spec, std::move(unused_shift));
}

}  // namespace phub::worker::onednn
