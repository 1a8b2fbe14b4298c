#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Pool::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 4));
  const Shape& x = inputs[0];
  PoolSpec s{.kind = o_.global ? PoolKind::kAverage : o_.kind, .batch = x[0], .channels = x[1],
             .height = x[2], .width = x[3], .kernel_h = o_.global ? x[2] : o_.kernel,
             .kernel_w = o_.global ? x[3] : o_.kernel, .stride_h = o_.global ? 1 : o_.stride,
             .stride_w = o_.global ? 1 : o_.stride, .pad_h = o_.global ? 0 : o_.pad,
             .pad_w = o_.global ? 0 : o_.pad};
  auto op = backend.MakePool(s);
  if (!op.ok()) return InLayer(op.status(), x);
  op_ = std::move(*op);
  return Shape{x[0], x[1], s.out_height(), s.out_width()};
}

Status Pool::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  return op_->Forward(*inputs[0], y);
}

Status Pool::Backward(std::span<const Tensor* const> inputs, const Tensor& y, const Tensor& dy,
                      std::span<Tensor* const> dinputs) {
  if (dinputs[0] == nullptr) return absl::OkStatus();
  return op_->Backward(*inputs[0], y, dy, *dinputs[0]);
}

}  // namespace phub::worker
