// The checks of the tensors each op is called with (ops_checks.h), shared by the backends; the
// checks of the specs are ops.cc's.
#include "worker/backend/ops_checks.h"

#include <cmath>
#include <initializer_list>

#include "absl/strings/str_cat.h"

namespace phub::worker {
namespace {

// A tensor argument and the shape the spec gives it.
struct Arg {
  const char* name;
  const Tensor& tensor;
  Shape shape;
};

Status CheckArgs(const char* op, Device device, std::initializer_list<Arg> args) {
  for (const Arg& a : args) {
    PHUB_RETURN_IF_ERROR(CheckTensor(op, a.name, a.tensor, device, a.shape));
  }
  return absl::OkStatus();
}

// A layer's weights, and their gradients, with the bias only where the spec has one; dx (and
// the w it needs) only where it is wanted.
Status CheckWeightedBackward(const char* op, Device device, const Tensor& x, const Tensor& w,
                             const Tensor& dy, const Tensor* dx, const Tensor& dw, const Tensor& db,
                             const Shape& xs, const Shape& ws, const Shape& ys, bool bias) {
  PHUB_RETURN_IF_ERROR(CheckArgs(op, device, {{"x", x, xs}, {"dy", dy, ys}, {"dw", dw, ws}}));
  if (dx != nullptr) PHUB_RETURN_IF_ERROR(CheckArgs(op, device, {{"w", w, ws}, {"dx", *dx, xs}}));
  if (bias) return CheckTensor(op, "db", db, device, Shape{ws[0]});
  return absl::OkStatus();
}

Status CheckLabels(const SoftmaxCrossEntropySpec& s, const Tensor& labels) {
  PHUB_RETURN_IF_ERROR(
      CheckTensor("SoftmaxCrossEntropy", "labels", labels, Device::kCpu, Shape{s.batch}));
  for (std::int64_t n = 0; n < s.batch; ++n) {
    const float l = labels.data()[n];
    if (!(l >= 0 && l < static_cast<float>(s.classes)) || l != std::floor(l)) {
      return absl::InvalidArgumentError(absl::StrCat("SoftmaxCrossEntropy: label ", n, " is ", l,
                                                     ", must be a class index in [0, ", s.classes,
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status CheckTensor(const char* op, const char* arg, const Tensor& t, Device device,
                   const Shape& expected) {
  const std::int64_t numel = expected.numel();
  if (t.device() != device || t.layout() != Layout::kNCHW || t.numel() != numel ||
      (numel > 0 && t.data() == nullptr)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", arg, " is ", t.ToString(), ", expected ", expected.ToString(), " ",
                     DeviceName(device), " (", numel, " elements, NCHW)"));
  }
  return absl::OkStatus();
}

Status CheckConv2dForward(const Conv2dSpec& s, Device device, const Tensor& x, const Tensor& w,
                          const Tensor& b, const Tensor& y) {
  const char* op = "Conv2d forward";
  PHUB_RETURN_IF_ERROR(
      CheckArgs(op, device,
                {{"x", x, {s.batch, s.in_channels, s.height, s.width}},
                 {"w", w, {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w}},
                 {"y", y, {s.batch, s.out_channels, s.out_height(), s.out_width()}}}));
  if (s.bias) return CheckTensor(op, "b", b, device, Shape{s.out_channels});
  return absl::OkStatus();
}

Status CheckConv2dBackward(const Conv2dSpec& s, Device device, const Tensor& x, const Tensor& w,
                           const Tensor& dy, const Tensor* dx, const Tensor& dw, const Tensor& db) {
  return CheckWeightedBackward("Conv2d backward", device, x, w, dy, dx, dw, db,
                               Shape{s.batch, s.in_channels, s.height, s.width},
                               {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w},
                               Shape{s.batch, s.out_channels, s.out_height(), s.out_width()},
                               s.bias);
}

Status CheckLinearForward(const LinearSpec& s, Device device, const Tensor& x, const Tensor& w,
                          const Tensor& b, const Tensor& y) {
  const char* op = "Linear forward";
  PHUB_RETURN_IF_ERROR(CheckArgs(op, device,
                                 {{"x", x, {s.batch, s.in_features}},
                                  {"w", w, {s.out_features, s.in_features}},
                                  {"y", y, {s.batch, s.out_features}}}));
  if (s.bias) return CheckTensor(op, "b", b, device, Shape{s.out_features});
  return absl::OkStatus();
}

Status CheckLinearBackward(const LinearSpec& s, Device device, const Tensor& x, const Tensor& w,
                           const Tensor& dy, const Tensor* dx, const Tensor& dw, const Tensor& db) {
  return CheckWeightedBackward("Linear backward", device, x, w, dy, dx, dw, db,
                               {s.batch, s.in_features}, {s.out_features, s.in_features},
                               {s.batch, s.out_features}, s.bias);
}

Status CheckBatchNormForwardTraining(const BatchNormSpec& s, Device device, const Tensor& x,
                                     const Tensor& gamma, const Tensor& beta, const Tensor& y,
                                     const Tensor& save_mean, const Tensor& save_var,
                                     const Tensor& running_mean, const Tensor& running_var) {
  const Shape xs{s.batch, s.channels, s.height, s.width}, c{s.channels};
  return CheckArgs("BatchNorm forward (training)", device,
                   {{"x", x, xs},
                    {"y", y, xs},
                    {"gamma", gamma, c},
                    {"beta", beta, c},
                    {"save_mean", save_mean, c},
                    {"save_var", save_var, c},
                    {"running_mean", running_mean, c},
                    {"running_var", running_var, c}});
}

Status CheckBatchNormForwardInference(const BatchNormSpec& s, Device device, const Tensor& x,
                                      const Tensor& gamma, const Tensor& beta,
                                      const Tensor& running_mean, const Tensor& running_var,
                                      const Tensor& y) {
  const Shape xs{s.batch, s.channels, s.height, s.width}, c{s.channels};
  return CheckArgs("BatchNorm forward (inference)", device,
                   {{"x", x, xs},
                    {"y", y, xs},
                    {"gamma", gamma, c},
                    {"beta", beta, c},
                    {"running_mean", running_mean, c},
                    {"running_var", running_var, c}});
}

Status CheckBatchNormBackward(const BatchNormSpec& s, Device device, const Tensor& x,
                              const Tensor& gamma, const Tensor& save_mean, const Tensor& save_var,
                              const Tensor& dy, const Tensor& dx, const Tensor& dgamma,
                              const Tensor& dbeta) {
  const Shape xs{s.batch, s.channels, s.height, s.width}, c{s.channels};
  return CheckArgs("BatchNorm backward", device,
                   {{"x", x, xs},
                    {"dy", dy, xs},
                    {"dx", dx, xs},
                    {"gamma", gamma, c},
                    {"save_mean", save_mean, c},
                    {"save_var", save_var, c},
                    {"dgamma", dgamma, c},
                    {"dbeta", dbeta, c}});
}

Status CheckActivationForward(const Shape& shape, Device device, const Tensor& x, const Tensor& y) {
  return CheckArgs("activation forward", device, {{"x", x, shape}, {"y", y, shape}});
}

Status CheckActivationBackward(const Shape& shape, Device device, const Tensor& y, const Tensor& dy,
                               const Tensor& dx) {
  return CheckArgs("activation backward", device,
                   {{"y", y, shape}, {"dy", dy, shape}, {"dx", dx, shape}});
}

Status CheckPoolForward(const PoolSpec& s, Device device, const Tensor& x, const Tensor& y) {
  return CheckArgs("Pool forward", device,
                   {{"x", x, {s.batch, s.channels, s.height, s.width}},
                    {"y", y, {s.batch, s.channels, s.out_height(), s.out_width()}}});
}

Status CheckPoolBackward(const PoolSpec& s, Device device, const Tensor& x, const Tensor& y,
                         const Tensor& dy, const Tensor& dx) {
  const Shape xs{s.batch, s.channels, s.height, s.width};
  const Shape ys{s.batch, s.channels, s.out_height(), s.out_width()};
  return CheckArgs("Pool backward", device,
                   {{"x", x, xs}, {"y", y, ys}, {"dy", dy, ys}, {"dx", dx, xs}});
}

Status CheckLrnForward(const LrnSpec& s, Device device, const Tensor& x, const Tensor& y) {
  const Shape xs{s.batch, s.channels, s.height, s.width};
  return CheckArgs("LRN forward", device, {{"x", x, xs}, {"y", y, xs}});
}

Status CheckLrnBackward(const LrnSpec& s, Device device, const Tensor& x, const Tensor& y,
                        const Tensor& dy, const Tensor& dx) {
  const Shape xs{s.batch, s.channels, s.height, s.width};
  return CheckArgs("LRN backward", device,
                   {{"x", x, xs}, {"y", y, xs}, {"dy", dy, xs}, {"dx", dx, xs}});
}

Status CheckSoftmaxCrossEntropyForward(const SoftmaxCrossEntropySpec& s, Device device,
                                       const Tensor& logits, const Tensor& labels) {
  PHUB_RETURN_IF_ERROR(CheckTensor("SoftmaxCrossEntropy forward", "logits", logits, device,
                                   Shape{s.batch, s.classes}));
  return CheckLabels(s, labels);
}

Status CheckSoftmaxCrossEntropyBackward(const SoftmaxCrossEntropySpec& s, Device device,
                                        const Tensor& labels, const Tensor& dlogits) {
  PHUB_RETURN_IF_ERROR(CheckTensor("SoftmaxCrossEntropy backward", "dlogits", dlogits, device,
                                   Shape{s.batch, s.classes}));
  return CheckLabels(s, labels);
}

Status CheckDropoutForward(const Shape& shape, Device device, const Tensor& x, const Tensor& y) {
  return CheckArgs("Dropout forward", device, {{"x", x, shape}, {"y", y, shape}});
}

Status CheckDropoutBackward(const Shape& shape, Device device, const Tensor& dy, const Tensor& dx) {
  return CheckArgs("Dropout backward", device, {{"dy", dy, shape}, {"dx", dx, shape}});
}

Status CheckShortcutForward(const ShortcutSpec& s, Device device, const Tensor& x,
                            const Tensor& y) {
  return CheckArgs("Shortcut forward", device,
                   {{"x", x, {s.batch, s.in_channels, s.height, s.width}},
                    {"y", y, {s.batch, s.out_channels, s.out_height(), s.out_width()}}});
}

Status CheckShortcutBackward(const ShortcutSpec& s, Device device, const Tensor& dy,
                             const Tensor& dx) {
  return CheckArgs("Shortcut backward", device,
                   {{"dy", dy, {s.batch, s.out_channels, s.out_height(), s.out_width()}},
                    {"dx", dx, {s.batch, s.in_channels, s.height, s.width}}});
}

Status CheckLstmForward(const LstmSpec& s, Device device, const Tensor& x, const Tensor& w_ih,
                        const Tensor& w_hh, const Tensor& bias, const Tensor& y) {
  const std::int64_t h4 = 4 * s.hidden_size;
  return CheckArgs("LSTM forward", device,
                   {{"x", x, {s.seq_len, s.batch, s.input_size}},
                    {"w_ih", w_ih, {h4, s.input_size}},
                    {"w_hh", w_hh, {h4, s.hidden_size}},
                    {"bias", bias, {h4}},
                    {"y", y, {s.seq_len, s.batch, s.hidden_size}}});
}

Status CheckLstmBackward(const LstmSpec& s, Device device, const Tensor& x, const Tensor& w_ih,
                         const Tensor& w_hh, const Tensor& bias, const Tensor& y, const Tensor& dy,
                         const Tensor* dx, const Tensor& dw_ih, const Tensor& dw_hh,
                         const Tensor& dbias) {
  const char* op = "LSTM backward";
  const std::int64_t h4 = 4 * s.hidden_size;
  const Shape xs{s.seq_len, s.batch, s.input_size}, ys{s.seq_len, s.batch, s.hidden_size};
  const Shape ih{h4, s.input_size}, hh{h4, s.hidden_size}, b{h4};
  PHUB_RETURN_IF_ERROR(CheckArgs(op, device,
                                 {{"x", x, xs},
                                  {"w_ih", w_ih, ih},
                                  {"w_hh", w_hh, hh},
                                  {"bias", bias, b},
                                  {"y", y, ys},
                                  {"dy", dy, ys},
                                  {"dw_ih", dw_ih, ih},
                                  {"dw_hh", dw_hh, hh},
                                  {"dbias", dbias, b}}));
  if (dx != nullptr) return CheckTensor(op, "dx", *dx, device, xs);
  return absl::OkStatus();
}

Status CheckEmbeddingForward(const EmbeddingSpec& s, Device device, const Tensor& ids,
                             const Tensor& table, const Tensor& y) {
  return CheckArgs(
      "Embedding forward", device,
      {{"ids", ids, {s.count}}, {"table", table, {s.vocab, s.dim}}, {"y", y, {s.count, s.dim}}});
}

Status CheckEmbeddingBackward(const EmbeddingSpec& s, Device device, const Tensor& ids,
                              const Tensor& dy, const Tensor& dtable) {
  return CheckArgs("Embedding backward", device,
                   {{"ids", ids, {s.count}},
                    {"dy", dy, {s.count, s.dim}},
                    {"dtable", dtable, {s.vocab, s.dim}}});
}

Status CheckEmbeddingIds(const EmbeddingSpec& s, std::span<const float> ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const float id = ids[i];
    if (!(id >= 0 && id < static_cast<float>(s.vocab)) || std::floor(id) != id) {
      return absl::InvalidArgumentError(absl::StrCat("Embedding: id ", id, " at position ", i,
                                                     " is not a row of the table [0, ", s.vocab,
                                                     "): check the data's vocabulary size"));
    }
  }
  return absl::OkStatus();
}

Status CheckOptimizerStep(Device device, const Tensor& grad, const Tensor& weights,
                          std::span<const Tensor> state, const kernels::OptimizerConfig& config,
                          std::uint64_t step) {
  const Shape flat{weights.numel()};
  PHUB_RETURN_IF_ERROR(CheckTensor("OptimizerStep", "weights", weights, device, flat));
  PHUB_RETURN_IF_ERROR(CheckTensor("OptimizerStep", "grad", grad, device, flat));
  const int arrays = kernels::StateArrays(config.kind);
  if (state.size() != static_cast<std::size_t>(arrays)) {
    return absl::InvalidArgumentError(absl::StrCat("OptimizerStep: ", state.size(),
                                                   " state tensors, ",
                                                   kernels::OptimizerName(config.kind),
                                                   " keeps ", arrays));
  }
  for (const Tensor& t : state) {
    PHUB_RETURN_IF_ERROR(CheckTensor("OptimizerStep", "state", t, device, flat));
  }
  if (step < 1) return absl::InvalidArgumentError("OptimizerStep: step counts from 1");
  return absl::OkStatus();
}

}  // namespace phub::worker
