#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Dropout::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 0));
  auto op = backend.MakeDropout(inputs[0], p_);
  if (!op.ok()) return InLayer(op.status(), inputs[0]);
  op_ = std::move(*op);
  backend_ = &backend;
  return inputs[0];
}

Status Dropout::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) {
  trained_ = training;
  if (training) return op_->Forward(*inputs[0], y, seed_ + step_++);
  return backend_->Copy(*inputs[0], y);
}

Status Dropout::Backward(std::span<const Tensor* const>, const Tensor&, const Tensor& dy,
                         std::span<Tensor* const> dinputs) {
  if (dinputs[0] == nullptr) return absl::OkStatus();
  if (trained_) return op_->Backward(dy, *dinputs[0]);
  return backend_->Copy(dy, *dinputs[0]);
}

}  // namespace phub::worker
