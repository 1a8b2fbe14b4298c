// The checks of every op's spec (ops.h's Validate), shared by the backends; the checks of the
// tensors each call is made with are ops_checks.cc's.
#include "worker/backend/ops.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace phub::worker {
namespace {

Status Positive(const char* op, absl::string_view field, std::int64_t v) {
  if (v < 1) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", field, " = ", v, ", must be >= 1"));
  }
  return absl::OkStatus();
}

// One spatial axis of a window op (conv, pool): kernel fits the padded input, padding smaller
// than the kernel (else a window sees only padding).
Status Window(const char* op, const char* axis, std::int64_t in, std::int64_t kernel,
              std::int64_t stride, std::int64_t pad) {
  PHUB_RETURN_IF_ERROR(Positive(op, absl::StrCat("kernel_", axis), kernel));
  PHUB_RETURN_IF_ERROR(Positive(op, absl::StrCat("stride_", axis), stride));
  if (pad < 0 || pad >= kernel) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": pad_", axis, " = ", pad, ", must be in [0, kernel_", axis, " = ", kernel, ")"));
  }
  if (in + 2 * pad < kernel) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": kernel_", axis, " = ", kernel,
                                                   " is larger than the padded input (", in,
                                                   " + 2*", pad, ")"));
  }
  return absl::OkStatus();
}

// The N, C, H, W of an image op.
Status PositiveImage(const char* op, std::int64_t batch, std::int64_t channels, std::int64_t height,
                     std::int64_t width, const char* channels_field = "channels") {
  PHUB_RETURN_IF_ERROR(Positive(op, "batch", batch));
  PHUB_RETURN_IF_ERROR(Positive(op, channels_field, channels));
  PHUB_RETURN_IF_ERROR(Positive(op, "height", height));
  return Positive(op, "width", width);
}

}  // namespace

Status Validate(const Conv2dSpec& s) {
  const char* op = "Conv2d";
  PHUB_RETURN_IF_ERROR(PositiveImage(op, s.batch, s.in_channels, s.height, s.width, "in_channels"));
  PHUB_RETURN_IF_ERROR(Positive(op, "out_channels", s.out_channels));
  PHUB_RETURN_IF_ERROR(Window(op, "h", s.height, s.kernel_h, s.stride_h, s.pad_h));
  return Window(op, "w", s.width, s.kernel_w, s.stride_w, s.pad_w);
}

Status Validate(const LinearSpec& s) {
  PHUB_RETURN_IF_ERROR(Positive("Linear", "batch", s.batch));
  PHUB_RETURN_IF_ERROR(Positive("Linear", "in_features", s.in_features));
  return Positive("Linear", "out_features", s.out_features);
}

Status Validate(const BatchNormSpec& s) {
  const char* op = "BatchNorm";
  PHUB_RETURN_IF_ERROR(PositiveImage(op, s.batch, s.channels, s.height, s.width));
  if (!(s.eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": eps = ", s.eps, ", must be > 0"));
  }
  if (!(s.momentum >= 0 && s.momentum <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": momentum = ", s.momentum, ", must be in [0, 1]"));
  }
  return absl::OkStatus();
}

Status Validate(const PoolSpec& s) {
  const char* op = "Pool";
  PHUB_RETURN_IF_ERROR(PositiveImage(op, s.batch, s.channels, s.height, s.width));
  PHUB_RETURN_IF_ERROR(Window(op, "h", s.height, s.kernel_h, s.stride_h, s.pad_h));
  return Window(op, "w", s.width, s.kernel_w, s.stride_w, s.pad_w);
}

Status Validate(const LrnSpec& s) {
  const char* op = "LocalResponseNorm";
  PHUB_RETURN_IF_ERROR(PositiveImage(op, s.batch, s.channels, s.height, s.width));
  if (s.size < 1 || s.size % 2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": size = ", s.size,
                                                   ", must be odd and >= 1 (a window centred on "
                                                   "the channel; AlexNet uses 5)"));
  }
  if (!(s.k > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": k = ", s.k, ", must be > 0"));
  }
  return absl::OkStatus();
}

Status Validate(const ShortcutSpec& s) {
  const char* op = "Shortcut";
  PHUB_RETURN_IF_ERROR(PositiveImage(op, s.batch, s.in_channels, s.height, s.width, "in_channels"));
  PHUB_RETURN_IF_ERROR(Positive(op, "stride", s.stride));
  if (s.out_channels < s.in_channels) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": out_channels = ", s.out_channels,
                                                   " < in_channels = ", s.in_channels,
                                                   " (it only pads channels)"));
  }
  return absl::OkStatus();
}

Status Validate(const SoftmaxCrossEntropySpec& s) {
  PHUB_RETURN_IF_ERROR(Positive("SoftmaxCrossEntropy", "batch", s.batch));
  return Positive("SoftmaxCrossEntropy", "classes", s.classes);
}

Status Validate(const LstmSpec& s) {
  PHUB_RETURN_IF_ERROR(Positive("LSTM", "seq_len", s.seq_len));
  PHUB_RETURN_IF_ERROR(Positive("LSTM", "batch", s.batch));
  PHUB_RETURN_IF_ERROR(Positive("LSTM", "input_size", s.input_size));
  return Positive("LSTM", "hidden_size", s.hidden_size);
}

Status Validate(const EmbeddingSpec& s) {
  PHUB_RETURN_IF_ERROR(Positive("Embedding", "count", s.count));
  PHUB_RETURN_IF_ERROR(Positive("Embedding", "vocab", s.vocab));
  PHUB_RETURN_IF_ERROR(Positive("Embedding", "dim", s.dim));
  if (s.vocab > (std::int64_t{1} << 24)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Embedding: vocab = ", s.vocab, " > 2^24: ids are stored as floats, exact to 2^24"));
  }
  return absl::OkStatus();
}

Status ValidateActivation(const Shape& shape) {
  if (shape.numel() < 1) {
    return absl::InvalidArgumentError("activation: empty shape " + shape.ToString());
  }
  return absl::OkStatus();
}

Status ValidateDropout(const Shape& shape, float p) {
  if (!(p >= 0 && p < 1)) {
    return absl::InvalidArgumentError(absl::StrCat("Dropout: p = ", p, ", must be in [0, 1)"));
  }
  if (shape.numel() < 1) {
    return absl::InvalidArgumentError("Dropout: empty shape " + shape.ToString());
  }
  return absl::OkStatus();
}

}  // namespace phub::worker
