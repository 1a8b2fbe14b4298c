#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

Shape BatchNorm::Setup(Backend& backend, std::span<const Shape> inputs) {
  ExpectInputs(inputs, 1, 0);
  const Shape& x = inputs[0];
  if (x.rank() != 2 && x.rank() != 4) Fail("expects [N, C] or [N, C, H, W], got " + x.ToString());
  BatchNormSpec s{.batch = x[0], .channels = x[1], .height = x.rank() == 4 ? x[2] : 1,
                  .width = x.rank() == 4 ? x[3] : 1, .eps = eps_, .momentum = momentum_};
  try {
    op_ = backend.MakeBatchNorm(s);
  } catch (const std::invalid_argument& e) {
    Fail(absl::StrCat("input ", x.ToString(), ": ", e.what()));
  }
  AddParameter(backend, "weight", {s.channels});
  AddParameter(backend, "bias", {s.channels});
  for (Tensor* t : {&running_mean_, &running_var_, &save_mean_, &save_var_}) {
    *t = backend.Allocate({s.channels});
  }
  std::mt19937_64 unused;  // BatchNorm's initial values are constants
  InitParameters(backend, unused);
  return x;
}

void BatchNorm::InitParameters(Backend& backend, std::mt19937_64&) {
  auto p = parameters();
  FillConstant(backend, p[0].value, 1.0f);
  FillConstant(backend, p[1].value, 0.0f);
  FillConstant(backend, running_mean_, 0.0f);
  FillConstant(backend, running_var_, 1.0f);
}

void BatchNorm::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) {
  auto p = parameters();
  if (training) {
    op_->ForwardTraining(*inputs[0], p[0].value, p[1].value, y, save_mean_, save_var_,
                         running_mean_, running_var_);
  } else {
    op_->ForwardInference(*inputs[0], p[0].value, p[1].value, running_mean_, running_var_, y);
  }
}

void BatchNorm::Backward(std::span<const Tensor* const> inputs, const Tensor&, const Tensor& dy,
                         std::span<Tensor* const> dinputs) {
  auto p = parameters();
  // oneDNN and cuDNN always produce dx; without a consumer it lands in a scratch tensor.
  Tensor scratch;
  Tensor* dx = dinputs[0];
  if (dx == nullptr) {
    scratch = Tensor::Empty(inputs[0]->shape(), inputs[0]->device());
    dx = &scratch;
  }
  op_->Backward(*inputs[0], p[0].value, save_mean_, save_var_, dy, *dx, p[0].grad, p[1].grad);
}

}  // namespace phub::worker
