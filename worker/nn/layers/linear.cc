#include <cmath>

#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Linear::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 0));
  const Shape& x = inputs[0];
  if (x.rank() < 2 || x.rank() > 4) {
    return Invalid("expects [N, In], [T, N, In] or [N, C, H, W], got " + x.ToString());
  }
  const std::int64_t rows = x.rank() == 3 ? x[0] * x[1] : x[0];
  const std::int64_t in = rows > 0 ? x.numel() / rows : 0;
  flat_ = Shape{rows, in};
  LinearSpec s{.batch = rows, .in_features = in, .out_features = out_, .bias = bias_};
  auto op = backend.MakeLinear(s);
  if (!op.ok()) return InLayer(op.status(), x);
  op_ = std::move(*op);
  PHUB_RETURN_IF_ERROR(AddParameter(backend, "weight", {out_, in}));
  if (bias_) PHUB_RETURN_IF_ERROR(AddParameter(backend, "bias", {out_}));
  return Shape{rows, out_};
}

Status Linear::InitParameters(Backend& backend, std::mt19937_64& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(flat_[1]));  // PyTorch's default
  for (Parameter& p : parameters()) PHUB_RETURN_IF_ERROR(FillUniform(backend, p, bound, rng));
  return absl::OkStatus();
}

Status Linear::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  auto p = parameters();
  return op_->Forward(inputs[0]->Reshaped(flat_), p[0].value, bias_ ? p[1].value : no_bias_, y);
}

Status Linear::Backward(std::span<const Tensor* const> inputs, const Tensor&, const Tensor& dy,
                        std::span<Tensor* const> dinputs) {
  auto p = parameters();
  Tensor dx_flat;
  if (dinputs[0] != nullptr) dx_flat = dinputs[0]->Reshaped(flat_);
  return op_->Backward(inputs[0]->Reshaped(flat_), p[0].value, dy,
                       dinputs[0] != nullptr ? &dx_flat : nullptr, p[0].grad,
                       bias_ ? p[1].grad : no_bias_);
}

}  // namespace phub::worker
