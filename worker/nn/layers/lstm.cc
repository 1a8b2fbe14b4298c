#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape Lstm::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 3);
  const Shape& x = inputs[0];
  const LstmSpec s{.seq_len = x[0], .batch = x[1], .input_size = x[2], .hidden_size = hidden_};
  try {
    op_ = backend.MakeLstm(s);
  } catch (const std::invalid_argument& e) {
    Fail(absl::StrCat("input ", x.ToString(), ": ", e.what()));
  }
  AddParameter(backend, "weight_ih", {4 * hidden_, x[2]});
  AddParameter(backend, "weight_hh", {4 * hidden_, hidden_});
  AddParameter(backend, "bias", {4 * hidden_});
  return {x[0], x[1], hidden_};
}

void Lstm::InitParameters(Backend& backend, std::mt19937_64& rng) {
  const double bound = 1.0 / std::sqrt(static_cast<double>(hidden_));
  for (Parameter& p : parameters()) FillUniform(backend, p, bound, rng);
}

void Lstm::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) {
  auto p = parameters();
  op_->Forward(*inputs[0], p[0].value, p[1].value, p[2].value, y, training);
}

void Lstm::Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                    std::span<Tensor* const> dinputs) {
  auto p = parameters();
  op_->Backward(*inputs[0], p[0].value, p[1].value, p[2].value, y, dy, dinputs[0], p[0].grad,
                p[1].grad, p[2].grad);
}

}  // namespace phub::worker
