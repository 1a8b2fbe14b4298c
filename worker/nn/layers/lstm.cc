#include <cmath>

#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Lstm::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 3));
  const Shape& x = inputs[0];
  const LstmSpec s{.seq_len = x[0], .batch = x[1], .input_size = x[2], .hidden_size = hidden_};
  auto op = backend.MakeLstm(s);
  if (!op.ok()) return InLayer(op.status(), x);
  op_ = std::move(*op);
  PHUB_RETURN_IF_ERROR(AddParameter(backend, "weight_ih", {4 * hidden_, x[2]}));
  PHUB_RETURN_IF_ERROR(AddParameter(backend, "weight_hh", {4 * hidden_, hidden_}));
  PHUB_RETURN_IF_ERROR(AddParameter(backend, "bias", {4 * hidden_}));
  return Shape{x[0], x[1], hidden_};
}

Status Lstm::InitParameters(Backend& backend, std::mt19937_64& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_));
  for (Parameter& p : parameters()) PHUB_RETURN_IF_ERROR(FillUniform(backend, p, bound, rng));
  return absl::OkStatus();
}

Status Lstm::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) {
  auto p = parameters();
  return op_->Forward(*inputs[0], p[0].value, p[1].value, p[2].value, y, training);
}

Status Lstm::Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                      std::span<Tensor* const> dinputs) {
  auto p = parameters();
  return op_->Backward(*inputs[0], p[0].value, p[1].value, p[2].value, y, dy, dinputs[0], p[0].grad,
                       p[1].grad, p[2].grad);
}

}  // namespace phub::worker
