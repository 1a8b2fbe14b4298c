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
    PHUB_RETURN_IF_ERROR(CheckBatchNormForwardTraining(
        s_, Device::kCpu, x, gamma, beta, y, save_mean, save_var, running_mean, running_var));
    PHUB_RETURN_IF_ERROR(OnednnCall("BatchNorm forward (training)", [&] {
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
    PHUB_RETURN_IF_ERROR(CheckBatchNormForwardInference(s_, Device::kCpu, x, gamma, beta,
                                                        running_mean, running_var, y));
    return OnednnCall("BatchNorm forward (inference)", [&] {
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
    PHUB_RETURN_IF_ERROR(CheckBatchNormBackward(s_, Device::kCpu, x, gamma, save_mean, save_var, dy,
                                                dx, dgamma, dbeta));
    return OnednnCall("BatchNorm backward", [&] {
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
