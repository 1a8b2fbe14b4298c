#include <cmath>

#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Conv2d::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 4));
  const Shape& x = inputs[0];
  Conv2dSpec s{.batch = x[0], .in_channels = x[1], .height = x[2], .width = x[3],
               .out_channels = o_.out_channels, .kernel_h = o_.kernel, .kernel_w = o_.kernel,
               .stride_h = o_.stride, .stride_w = o_.stride, .pad_h = o_.pad, .pad_w = o_.pad,
               .bias = o_.bias};
  auto op = backend.MakeConv2d(s);
  if (!op.ok()) return InLayer(op.status(), x);
  op_ = std::move(*op);
  fan_in_ = s.in_channels * s.kernel_h * s.kernel_w;
  PHUB_RETURN_IF_ERROR(
      AddParameter(backend, "weight", {s.out_channels, s.in_channels, s.kernel_h, s.kernel_w}));
  if (o_.bias) PHUB_RETURN_IF_ERROR(AddParameter(backend, "bias", {s.out_channels}));
  return Shape{s.batch, s.out_channels, s.out_height(), s.out_width()};
}

Status Conv2d::InitParameters(Backend& backend, std::mt19937_64& rng) {
  // PyTorch's default: kaiming_uniform(a = sqrt(5)) for the weight and U(+-1/sqrt(fan_in)) for
  // the bias, both of bound 1/sqrt(fan_in).
  const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in_));
  for (Parameter& p : parameters()) PHUB_RETURN_IF_ERROR(FillUniform(backend, p, bound, rng));
  return absl::OkStatus();
}

Status Conv2d::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  auto p = parameters();
  return op_->Forward(*inputs[0], p[0].value, o_.bias ? p[1].value : no_bias_, y);
}

Status Conv2d::Backward(std::span<const Tensor* const> inputs, const Tensor&, const Tensor& dy,
                        std::span<Tensor* const> dinputs) {
  auto p = parameters();
  return op_->Backward(*inputs[0], p[0].value, dy, dinputs[0], p[0].grad,
                       o_.bias ? p[1].grad : no_bias_);
}

}  // namespace phub::worker
