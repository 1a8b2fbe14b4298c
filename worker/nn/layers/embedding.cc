#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape Embedding::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 2);
  const Shape& ids = inputs[0];
  ids_ = Shape{ids.numel()};
  flat_y_ = Shape{ids.numel(), dim_};
  try {
    op_ = backend.MakeEmbedding({.count = ids.numel(), .vocab = vocab_, .dim = dim_});
  } catch (const std::invalid_argument& e) {
    Fail(absl::StrCat("input ", ids.ToString(), ": ", e.what()));
  }
  AddParameter(backend, "weight", {vocab_, dim_});
  return {ids[0], ids[1], dim_};
}

void Embedding::InitParameters(Backend& backend, std::mt19937_64& rng) {
  FillUniform(backend, parameters()[0], 0.1, rng);
}

void Embedding::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  Tensor flat = y.Reshaped(flat_y_);
  op_->Forward(inputs[0]->Reshaped(ids_), parameters()[0].value, flat);
}

void Embedding::Backward(std::span<const Tensor* const> inputs, const Tensor&, const Tensor& dy,
                         std::span<Tensor* const>) {
  // Ids have no gradient: dinputs[0] is left alone.
  op_->Backward(inputs[0]->Reshaped(ids_), dy.Reshaped(flat_y_), parameters()[0].grad);
}

}  // namespace phub::worker
