// The option-A shortcut is pure data movement with no oneDNN primitive: a strided copy into
// the middle channels of y (zeros around it), and its transpose for the backward.
#include <algorithm>

#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

class Shortcut final : public ShortcutOp {
 public:
  explicit Shortcut(const ShortcutSpec& s) : s_(s) {}

  Status Forward(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckShortcutForward(s_, Device::kCpu, x, y));
    std::fill_n(y.data(), y.numel(), 0.0f);
    Walk([&](std::int64_t xi, std::int64_t yi) { y.data()[yi] = x.data()[xi]; });
    return absl::OkStatus();
  }

  Status Backward(const Tensor& dy, Tensor& dx) override {
    PHUB_RETURN_IF_ERROR(CheckShortcutBackward(s_, Device::kCpu, dy, dx));
    std::fill_n(dx.data(), dx.numel(), 0.0f);  // the rows and columns the stride skipped
    Walk([&](std::int64_t xi, std::int64_t yi) { dx.data()[xi] = dy.data()[yi]; });
    return absl::OkStatus();
  }

 private:
  // Calls f(x index, y index) for every element the shortcut carries.
  template <class F>
  void Walk(F f) const {
    const std::int64_t oh = s_.out_height(), ow = s_.out_width();
    for (std::int64_t n = 0; n < s_.batch; ++n) {
      for (std::int64_t c = 0; c < s_.in_channels; ++c) {
        const std::int64_t xc = (n * s_.in_channels + c) * s_.height * s_.width;
        const std::int64_t yc = (n * s_.out_channels + c + s_.pad_front()) * oh * ow;
        for (std::int64_t h = 0; h < oh; ++h) {
          for (std::int64_t w = 0; w < ow; ++w) {
            f(xc + h * s_.stride * s_.width + w * s_.stride, yc + h * ow + w);
          }
        }
      }
    }
  }

  ShortcutSpec s_;
};

}  // namespace

StatusOr<std::unique_ptr<ShortcutOp>> MakeShortcut(Context&, const ShortcutSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return std::make_unique<Shortcut>(spec);
}

}  // namespace phub::worker::onednn
