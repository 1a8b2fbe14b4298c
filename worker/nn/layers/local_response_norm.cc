#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> LocalResponseNorm::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 4));
  const Shape& x = inputs[0];
  p_.batch = x[0], p_.channels = x[1], p_.height = x[2], p_.width = x[3];
  auto op = backend.MakeLrn(p_);
  if (!op.ok()) return InLayer(op.status(), x);
  op_ = std::move(*op);
  return x;
}

Status LocalResponseNorm::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  return op_->Forward(*inputs[0], y);
}

Status LocalResponseNorm::Backward(std::span<const Tensor* const> inputs, const Tensor& y,
                                   const Tensor& dy, std::span<Tensor* const> dinputs) {
  if (dinputs[0] == nullptr) return absl::OkStatus();
  return op_->Backward(*inputs[0], y, dy, *dinputs[0]);
}

}  // namespace phub::worker
