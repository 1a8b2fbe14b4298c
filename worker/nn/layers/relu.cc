#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape Relu::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 0);
  op_ = backend.MakeRelu(inputs[0]);
  return inputs[0];
}

void Relu::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  op_->Forward(*inputs[0], y);
}

void Relu::Backward(std::span<const Tensor* const>, const Tensor& y, const Tensor& dy,
                    std::span<Tensor* const> dinputs) {
  if (dinputs[0] != nullptr) op_->Backward(y, dy, *dinputs[0]);
}

}  // namespace phub::worker
