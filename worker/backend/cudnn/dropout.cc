// Dropout with a counter-based mask (dropout_mask.h): cuDNN's dropout keeps a generator state
// of its own (megabytes, initialised by a slow kernel) and a reserve space per call, and draws
// its mask from that state, not from the seed the layer passes each step. A hash of (seed,
// index) makes the mask a function of the seed alone: nothing stored, the backward recomputes
// it, and runs repeat exactly. It is not the CPU backend's mask (std::mt19937_64 there).
#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class Dropout final : public DropoutOp {
 public:
  Dropout(Context& ctx, const Shape& shape, float p)
      : ctx_(ctx), shape_(shape), n_(shape.numel()), p_(p) {}

  Status Forward(const Tensor& x, Tensor& y, std::uint64_t seed) override {
    PHUB_RETURN_IF_ERROR(CheckDropoutForward(shape_, Device::kCuda, x, y));
    seed_ = seed;
    PHUB_RETURN_IF_CUDA_ERROR(LaunchDropout(x.data(), y.data(), n_, seed, p_, ctx_.stream()));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckDropoutBackward(shape_, Device::kCuda, dy, dx));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchDropout(dy.data(), dx.data(), n_, seed_, p_, ctx_.stream()));
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  Shape shape_;
  std::int64_t n_;
  float p_;
  std::uint64_t seed_ = 0;  // the last forward's: its mask is the backward's
};

}  // namespace

StatusOr<std::unique_ptr<DropoutOp>> MakeDropout(Context& ctx, const Shape& shape, float p) {
  PHUB_RETURN_IF_ERROR(ValidateDropout(shape, p));
  return std::make_unique<Dropout>(ctx, shape, p);
}

}  // namespace phub::worker::cudnn
