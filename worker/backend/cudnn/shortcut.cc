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
      : ctx_(ctx), d_{s.batch,        s.in_channels, s.height, s.width,      s.out_channels,
                      s.out_height(), s.out_width(), s.stride, s.pad_front()} {}

  void Forward(const Tensor& x, Tensor& y) override {
    Check("Shortcut forward", "x", x, d_.batch * d_.in_channels * d_.height * d_.width);
    Check("Shortcut forward", "y", y, d_.batch * d_.out_channels * d_.out_height * d_.out_width);
    PHUB_CUDA_CHECK(LaunchShortcutForward(x.data(), y.data(), d_, ctx_.stream()));
  }

  void Backward(const Tensor& dy, Tensor& dx) override {
    Check("Shortcut backward", "dy", dy, d_.batch * d_.out_channels * d_.out_height * d_.out_width);
    Check("Shortcut backward", "dx", dx, d_.batch * d_.in_channels * d_.height * d_.width);
    PHUB_CUDA_CHECK(LaunchShortcutBackward(dy.data(), dx.data(), d_, ctx_.stream()));
  }

 private:
  Context& ctx_;
  ShortcutDims d_;
};

}  // namespace

std::unique_ptr<ShortcutOp> MakeShortcut(Context& ctx, const ShortcutSpec& spec) {
  Validate(spec);
  return std::make_unique<Shortcut>(ctx, spec);
}

}  // namespace phub::worker::cudnn
