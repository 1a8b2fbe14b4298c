// Dropout on the CPU: oneDNN 2.6 has no dropout primitive, so this is the one hand loop of the
// backend: a Bernoulli mask (std::mt19937_64 from the step's seed), kept for the backward.
#include <random>

#include "absl/strings/str_cat.h"
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

class Dropout final : public DropoutOp {
 public:
  Dropout(const Shape& shape, float p)
      : flat_({shape.numel()}), p_(p), mask_(Tensor::Empty(Shape{shape.numel()})) {}

  void Forward(const Tensor& x, Tensor& y, std::uint64_t seed) override {
    Check("Dropout forward", "x", x, flat_);
    Check("Dropout forward", "y", y, flat_);
    std::mt19937_64 rng(seed);
    std::bernoulli_distribution keep(1.0 - p_);
    const float scale = 1.0f / (1.0f - p_);
    float* m = mask_.data();
    for (std::int64_t i = 0; i < flat_[0]; ++i) m[i] = keep(rng) ? scale : 0.0f;
    for (std::int64_t i = 0; i < flat_[0]; ++i) y.data()[i] = x.data()[i] * m[i];
  }

  void Backward(const Tensor& dy, Tensor& dx) override {
    Check("Dropout backward", "dy", dy, flat_);
    Check("Dropout backward", "dx", dx, flat_);
    const float* m = mask_.data();
    for (std::int64_t i = 0; i < flat_[0]; ++i) dx.data()[i] = dy.data()[i] * m[i];
  }

 private:
  dims flat_;
  float p_;
  Tensor mask_;
};

}  // namespace

std::unique_ptr<DropoutOp> MakeDropout(Context&, const Shape& shape, float p) {
  if (!(p >= 0 && p < 1)) {
    throw std::invalid_argument(absl::StrCat("Dropout: p = ", p, ", must be in [0, 1)"));
  }
  if (shape.numel() < 1) throw std::invalid_argument("Dropout: empty shape " + shape.ToString());
  return std::make_unique<Dropout>(shape, p);
}

}  // namespace phub::worker::onednn
