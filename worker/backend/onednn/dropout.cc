// Dropout on the CPU: oneDNN 2.6 has no dropout primitive, so this is the one hand loop of the
// backend: a Bernoulli mask (std::mt19937_64 from the step's seed), kept for the backward.
#include <random>

#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

class Dropout final : public DropoutOp {
 public:
  // mask: [numel] host storage for the mask.
  Dropout(const Shape& shape, float p, Tensor mask)
      : shape_(shape), p_(p), mask_(std::move(mask)) {}

  Status Forward(const Tensor& x, Tensor& y, std::uint64_t seed) override {
    PHUB_RETURN_IF_ERROR(CheckDropoutForward(shape_, Device::kCpu, x, y));
    std::mt19937_64 rng(seed);
    std::bernoulli_distribution keep(1.0 - p_);
    const float scale = 1.0f / (1.0f - p_);
    float* m = mask_.data();
    const std::int64_t n = shape_.numel();
    for (std::int64_t i = 0; i < n; ++i) m[i] = keep(rng) ? scale : 0.0f;
    for (std::int64_t i = 0; i < n; ++i) y.data()[i] = x.data()[i] * m[i];
    return absl::OkStatus();
  }

  Status Backward(const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckDropoutBackward(shape_, Device::kCpu, dy, dx));
    const float* m = mask_.data();
    for (std::int64_t i = 0; i < shape_.numel(); ++i) dx.data()[i] = dy.data()[i] * m[i];
    return absl::OkStatus();
  }

 private:
  Shape shape_;
  float p_;
  Tensor mask_;
};

}  // namespace

StatusOr<std::unique_ptr<DropoutOp>> MakeDropout(Context&, const Shape& shape, float p) {
  PHUB_RETURN_IF_ERROR(ValidateDropout(shape, p));
  PHUB_ASSIGN_OR_RETURN(Tensor mask, Tensor::Allocate(Shape{shape.numel()}));
  return std::make_unique<Dropout>(shape, p, std::move(mask));
}

}  // namespace phub::worker::onednn
