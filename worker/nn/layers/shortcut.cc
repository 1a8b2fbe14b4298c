#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> Shortcut::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 4));
  const Shape& x = inputs[0];
  ShortcutSpec s{.batch = x[0], .in_channels = x[1], .height = x[2], .width = x[3],
                 .out_channels = out_, .stride = stride_};
  auto op = backend.MakeShortcut(s);
  if (!op.ok()) return InLayer(op.status(), x);
  op_ = std::move(*op);
  return Shape{s.batch, s.out_channels, s.out_height(), s.out_width()};
}

Status Shortcut::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  return op_->Forward(*inputs[0], y);
}

Status Shortcut::Backward(std::span<const Tensor* const>, const Tensor&, const Tensor& dy,
                          std::span<Tensor* const> dinputs) {
  if (dinputs[0] == nullptr) return absl::OkStatus();
  return op_->Backward(dy, *dinputs[0]);
}

}  // namespace phub::worker
