#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape Pool::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 4);
  const Shape& x = inputs[0];
  PoolSpec s{.kind = o_.global ? PoolKind::kAverage : o_.kind, .batch = x[0], .channels = x[1],
             .height = x[2], .width = x[3], .kernel_h = o_.global ? x[2] : o_.kernel,
             .kernel_w = o_.global ? x[3] : o_.kernel, .stride_h = o_.global ? 1 : o_.stride,
             .stride_w = o_.global ? 1 : o_.stride, .pad_h = o_.global ? 0 : o_.pad,
             .pad_w = o_.global ? 0 : o_.pad};
  try {
    op_ = backend.MakePool(s);
  } catch (const std::invalid_argument& e) {
    Fail(absl::StrCat("input ", x.ToString(), ": ", e.what()));
  }
  return {x[0], x[1], s.out_height(), s.out_width()};
}

void Pool::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  op_->Forward(*inputs[0], y);
}

void Pool::Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                    std::span<Tensor* const> dinputs) {
  if (dinputs[0] != nullptr) op_->Backward(*inputs[0], y, dy, *dinputs[0]);
}

}  // namespace phub::worker
