#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape Dropout::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 0);
  try {
    op_ = backend.MakeDropout(inputs[0], p_);
  } catch (const std::invalid_argument& e) {
    Fail(e.what());
  }
  backend_ = &backend;
  return inputs[0];
}

void Dropout::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) {
  trained_ = training;
  if (training) {
    op_->Forward(*inputs[0], y, seed_ + step_++);
  } else {
    backend_->Copy(*inputs[0], y);
  }
}

void Dropout::Backward(std::span<const Tensor* const>, const Tensor&, const Tensor& dy,
                       std::span<Tensor* const> dinputs) {
  if (dinputs[0] == nullptr) return;
  if (trained_) {
    op_->Backward(dy, *dinputs[0]);
  } else {
    backend_->Copy(dy, *dinputs[0]);
  }
}

}  // namespace phub::worker
