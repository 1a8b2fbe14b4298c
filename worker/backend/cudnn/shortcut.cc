// The option-A shortcut is strided data movement plus zero channels; cuDNN's closest tool
// (cudnnTransformTensor with strided descriptors) copies only, so the zero padding would be a
// second pass. One gather kernel each way instead (kernels.h), writing every output element.
#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class Shortcut final : public ShortcutOp {
 public:
  Shortcut(Context& ctx, const ShortcutSpec& s)
      : ctx_(ctx), s_(s), d_{s.batch,        s.in_channels, s.height, s.width,      s.out_channels,
                             s.out_height(), s.out_width(), s.stride, s.pad_front()} {}

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckShortcutForward(s_, Device::kCuda, x, y));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchShortcutForward(x.data(), y.data(), d_, ctx_.stream()));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckShortcutBackward(s_, Device::kCuda, dy, dx));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchShortcutBackward(dy.data(), dx.data(), d_, ctx_.stream()));
    return absl::OkStatus();
  }

 private:
  Context& ctx_;
  ShortcutSpec s_;
  ShortcutDims d_;
};

}  // namespace

StatusOr<std::unique_ptr<ShortcutOp>> MakeShortcut(Context& ctx, const ShortcutSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return std::make_unique<Shortcut>(ctx, spec);
}

}  // namespace phub::worker::cudnn
