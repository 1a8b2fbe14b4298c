#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape LocalResponseNorm::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 4);
  const Shape& x = inputs[0];
  p_.batch = x[0], p_.channels = x[1], p_.height = x[2], p_.width = x[3];
  try {
    op_ = backend.MakeLrn(p_);
  } catch (const std::invalid_argument& e) {
    Fail(absl::StrCat("input ", x.ToString(), ": ", e.what()));
  }
  return x;
}

void LocalResponseNorm::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  op_->Forward(*inputs[0], y);
}

void LocalResponseNorm::Backward(std::span<const Tensor* const> inputs, const Tensor& y,
                                 const Tensor& dy, std::span<Tensor* const> dinputs) {
  if (dinputs[0] != nullptr) op_->Backward(*inputs[0], y, dy, *dinputs[0]);
}

}  // namespace phub::worker
