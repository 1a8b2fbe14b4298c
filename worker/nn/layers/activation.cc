#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape Activation::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 0);
  op_ = backend.MakeActivation(kind_, inputs[0]);
  return inputs[0];
}

void Activation::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  op_->Forward(*inputs[0], y);
}

void Activation::Backward(std::span<const Tensor* const>, const Tensor& y, const Tensor& dy,
                    std::span<Tensor* const> dinputs) {
  if (dinputs[0] != nullptr) op_->Backward(y, dy, *dinputs[0]);
}

}  // namespace phub::worker
