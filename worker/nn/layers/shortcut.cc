#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape Shortcut::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 4);
  const Shape& x = inputs[0];
  ShortcutSpec s{.batch = x[0], .in_channels = x[1], .height = x[2], .width = x[3],
                 .out_channels = out_, .stride = stride_};
  try {
    op_ = backend.MakeShortcut(s);
  } catch (const std::invalid_argument& e) {
    Fail(absl::StrCat("input ", x.ToString(), ": ", e.what()));
  }
  return {s.batch, s.out_channels, s.out_height(), s.out_width()};
}

void Shortcut::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool) {
  op_->Forward(*inputs[0], y);
}

void Shortcut::Backward(std::span<const Tensor* const>, const Tensor&, const Tensor& dy,
                        std::span<Tensor* const> dinputs) {
  if (dinputs[0] != nullptr) op_->Backward(dy, *dinputs[0]);
}

}  // namespace phub::worker
