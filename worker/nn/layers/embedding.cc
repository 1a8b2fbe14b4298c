#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Embedding::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 2));
  const Shape& ids = inputs[0];
  ids_ = Shape{ids.numel()};
  flat_y_ = Shape{ids.numel(), dim_};
  auto op = backend.MakeEmbedding({.count = ids.numel(), .vocab = vocab_, .dim = dim_});
  if (!op.ok()) return InLayer(op.status(), ids);
  op_ = std::move(*op);
  PHUB_RETURN_IF_ERROR(AddParameter(backend, "weight", {vocab_, dim_}));
  return Shape{ids[0], ids[1], dim_};
}

Status Embedding::InitParameters(Backend& backend, std::mt19937_64& rng) {
  return FillUniform(backend, parameters()[0], 0.1, rng);
}

Status Embedding::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  Tensor flat = y.Reshaped(flat_y_);
  return op_->Forward(inputs[0]->Reshaped(ids_), parameters()[0].value, flat);
}

Status Embedding::Backward(std::span<const Tensor* const> inputs, const Tensor&, const Tensor& dy,
                           std::span<Tensor* const>) {
  // Ids have no gradient: dinputs[0] is left alone.
  return op_->Backward(inputs[0]->Reshaped(ids_), dy.Reshaped(flat_y_), parameters()[0].grad);
}

}  // namespace phub::worker
