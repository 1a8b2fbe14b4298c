#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"

namespace phub::worker {

StatusOr<Shape> BatchNorm::Setup(Backend& backend, std::span<const Shape> inputs) {
  PHUB_RETURN_IF_ERROR(ExpectInputs(inputs, 1, 0));
  const Shape& x = inputs[0];
  if (x.rank() != 2 && x.rank() != 4) {
    return Invalid("expects [N, C] or [N, C, H, W], got " + x.ToString());
  }
  BatchNormSpec s{.batch = x[0], .channels = x[1], .height = x.rank() == 4 ? x[2] : 1,
                  .width = x.rank() == 4 ? x[3] : 1, .eps = eps_, .momentum = momentum_};
  auto op = backend.MakeBatchNorm(s);
  if (!op.ok()) return InLayer(op.status(), x);
  op_ = std::move(*op);
  backend_ = &backend;
  PHUB_RETURN_IF_ERROR(AddParameter(backend, "weight", {s.channels}));
  PHUB_RETURN_IF_ERROR(AddParameter(backend, "bias", {s.channels}));
  for (Tensor* t : {&running_mean_, &running_var_, &save_mean_, &save_var_}) {
    PHUB_ASSIGN_OR_RETURN(*t, backend.Allocate({s.channels}));
  }
  std::mt19937_64 unused;  // BatchNorm's initial values are constants
  PHUB_RETURN_IF_ERROR(InitParameters(backend, unused));
  return x;
}

Status BatchNorm::InitParameters(Backend& backend, std::mt19937_64&) {
  auto p = parameters();
  PHUB_RETURN_IF_ERROR(FillConstant(backend, p[0].value, 1.0f));
  PHUB_RETURN_IF_ERROR(FillConstant(backend, p[1].value, 0.0f));
  PHUB_RETURN_IF_ERROR(FillConstant(backend, running_mean_, 0.0f));
  return FillConstant(backend, running_var_, 1.0f);
}

Status BatchNorm::Forward(std::span<const Tensor* const> inputs, Tensor& y, bool training) {
  auto p = parameters();
  if (training) {
    return op_->ForwardTraining(*inputs[0], p[0].value, p[1].value, y, save_mean_, save_var_,
                                running_mean_, running_var_);
  }
  return op_->ForwardInference(*inputs[0], p[0].value, p[1].value, running_mean_, running_var_, y);
}

Status BatchNorm::Backward(std::span<const Tensor* const> inputs, const Tensor&, const Tensor& dy,
                           std::span<Tensor* const> dinputs) {
  auto p = parameters();
  // oneDNN and cuDNN always produce dx; without a consumer it lands in a scratch tensor.
  Tensor* dx = dinputs[0];
  if (dx == nullptr) {
    if (!dx_scratch_.defined()) {
      PHUB_ASSIGN_OR_RETURN(dx_scratch_, backend_->Allocate(inputs[0]->shape()));
    }
    dx = &dx_scratch_;
  }
  return op_->Backward(*inputs[0], p[0].value, save_mean_, save_var_, dy, *dx, p[0].grad,
                       p[1].grad);
}

}  // namespace phub::worker
