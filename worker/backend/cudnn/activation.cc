// ReLU and sigmoid: cuDNN's activation forward on the tensor seen as one flat array, and a
// backward kernel of our own (kernels.h). ops.h's backward reads only y, so layers may keep y
// alone and run the forward in place; cuDNN's backward also takes x, and which of the two it
// reads for each function is not documented — passing y for x would be right for ReLU and a
// guess for sigmoid.
#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class Activation final : public ActivationOp {
 public:
  Activation(Context& ctx, ActivationKind kind, const Shape& shape)
      : ctx_(ctx), kind_(kind), shape_(shape), n_(shape.numel()) {}

  Status Init() {
    PHUB_RETURN_IF_ERROR(SetNchw(desc_, "activation", 1, 1, 1, n_));
    PHUB_RETURN_IF_ERROR(act_.Init());
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetActivationDescriptor(
        act_, kind_ == ActivationKind::kRelu ? CUDNN_ACTIVATION_RELU : CUDNN_ACTIVATION_SIGMOID,
        CUDNN_PROPAGATE_NAN, 0.0));
    return absl::OkStatus();
  }

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckActivationForward(shape_, Device::kCuda, x, y));
    PHUB_RETURN_IF_CUDNN_ERROR(cudnnActivationForward(ctx_.cudnn(), act_, &kOne, desc_, x.data(),
                                                      &kZero, desc_, y.data()));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckActivationBackward(shape_, Device::kCuda, y, dy, dx));
    if (kind_ == ActivationKind::kRelu) {
      PHUB_RETURN_IF_CUDA_ERROR(
          LaunchReluBackward(y.data(), dy.data(), dx.data(), n_, ctx_.stream()));
    } else {
      PHUB_RETURN_IF_CUDA_ERROR(
          LaunchSigmoidBackward(y.data(), dy.data(), dx.data(), n_, ctx_.stream()));
    }
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  ActivationKind kind_;
  Shape shape_;
  std::int64_t n_;
  TensorDesc desc_;  // [1, 1, 1, n]
  ActivationDesc act_;
};

}  // namespace

StatusOr<std::unique_ptr<ActivationOp>> MakeActivation(Context& ctx, ActivationKind kind,
                                                       const Shape& shape) {
  PHUB_RETURN_IF_ERROR(ValidateActivation(shape));
  auto op = std::make_unique<Activation>(ctx, kind, shape);
  PHUB_RETURN_IF_ERROR(op->Init());
  return op;
}

}  // namespace phub::worker::cudnn
