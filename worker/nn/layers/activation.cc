#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Activation::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 0));
  auto op = backend.MakeActivation(kind_, inputs[0]);
  if (!op.ok()) return InLayer(op.status(), inputs[0]);
  op_ = std::move(*op);
  return inputs[0];
}

Status Activation::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  return op_->Forward(*inputs[0], y);
}

Status Activation::Backward(std::span<const Tensor* const>, const Tensor& y, const Tensor& dy,
                            std::span<Tensor* const> dinputs) {
  if (dinputs[0] == nullptr) return absl::OkStatus();
  return op_->Backward(y, dy, *dinputs[0]);
}

}  // namespace phub::worker
