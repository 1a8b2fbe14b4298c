#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Add::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 2, 0));
  if (inputs[0] != inputs[1]) {
    return Invalid("adds tensors of one shape, got " + inputs[0].ToString() + " and " +
                   inputs[1].ToString());
  }
  backend_ = &backend;
  return inputs[0];
}

Status Add::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  return backend_->Add(*inputs[0], *inputs[1], y);
}

Status Add::Backward(std::span<const Tensor* const>, const Tensor&, const Tensor& dy,
                     std::span<Tensor* const> dinputs) {
  // d(a + b)/da = d(a + b)/db = 1: both inputs get dy.
  for (Tensor* d : dinputs) {
    if (d != nullptr) PHUB_RETURN_IF_ERROR(backend_->Copy(dy, *d));
  }
  return absl::OkStatus();
}

}  // namespace phub::worker
