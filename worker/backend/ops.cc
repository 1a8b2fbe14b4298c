#include "worker/backend/ops.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace phub::worker {
namespace {

void Positive(const char* op, const char* field, std::int64_t v) {
  if (v < 1) throw std::invalid_argument(absl::StrCat(op, ": ", field, " = ", v, ", must be >= 1"));
}

// One spatial axis of a window op (conv, pool): kernel fits the padded input, padding smaller
// than the kernel (else a window sees only padding).
void Window(const char* op, const char* axis, std::int64_t in, std::int64_t kernel,
            std::int64_t stride, std::int64_t pad) {
  Positive(op, absl::StrCat("kernel_", axis).c_str(), kernel);
  Positive(op, absl::StrCat("stride_", axis).c_str(), stride);
  if (pad < 0 || pad >= kernel) {
    throw std::invalid_argument(absl::StrCat(op, ": pad_", axis, " = ", pad,
                                             ", must be in [0, kernel_", axis, " = ", kernel, ")"));
  }
  if (in + 2 * pad < kernel) {
    throw std::invalid_argument(absl::StrCat(op, ": kernel_", axis, " = ", kernel,
                                             " is larger than the padded input (", in, " + 2*",
                                             pad, ")"));
  }
}

// The N, C, H, W of an image op.
void PositiveImage(const char* op, std::int64_t batch, std::int64_t channels, std::int64_t height,
                   std::int64_t width, const char* channels_field = "channels") {
  Positive(op, "batch", batch);
  Positive(op, channels_field, channels);
  Positive(op, "height", height);
  Positive(op, "width", width);
}

}  // namespace

void Validate(const Conv2dSpec& s) {
  const char* op = "Conv2d";
  PositiveImage(op, s.batch, s.in_channels, s.height, s.width, "in_channels");
  Positive(op, "out_channels", s.out_channels);
  Window(op, "h", s.height, s.kernel_h, s.stride_h, s.pad_h);
  Window(op, "w", s.width, s.kernel_w, s.stride_w, s.pad_w);
}

void Validate(const LinearSpec& s) {
  Positive("Linear", "batch", s.batch);
  Positive("Linear", "in_features", s.in_features);
  Positive("Linear", "out_features", s.out_features);
}

void Validate(const BatchNormSpec& s) {
  const char* op = "BatchNorm";
  PositiveImage(op, s.batch, s.channels, s.height, s.width);
  if (!(s.eps > 0)) throw std::invalid_argument(absl::StrCat(op, ": eps = ", s.eps, ", must be > 0"));
  if (!(s.momentum >= 0 && s.momentum <= 1)) {
    throw std::invalid_argument(absl::StrCat(op, ": momentum = ", s.momentum, ", must be in [0, 1]"));
  }
}

void Validate(const PoolSpec& s) {
  const char* op = "Pool";
  PositiveImage(op, s.batch, s.channels, s.height, s.width);
  Window(op, "h", s.height, s.kernel_h, s.stride_h, s.pad_h);
  Window(op, "w", s.width, s.kernel_w, s.stride_w, s.pad_w);
}

void Validate(const LrnSpec& s) {
  const char* op = "LocalResponseNorm";
  PositiveImage(op, s.batch, s.channels, s.height, s.width);
  if (s.size < 1 || s.size % 2 == 0) {
    throw std::invalid_argument(absl::StrCat(op, ": size = ", s.size,
                                             ", must be odd and >= 1 (a window centred on the "
                                             "channel; AlexNet uses 5)"));
  }
  if (!(s.k > 0)) throw std::invalid_argument(absl::StrCat(op, ": k = ", s.k, ", must be > 0"));
}

void Validate(const ShortcutSpec& s) {
  const char* op = "Shortcut";
  PositiveImage(op, s.batch, s.in_channels, s.height, s.width, "in_channels");
  Positive(op, "stride", s.stride);
  if (s.out_channels < s.in_channels) {
    throw std::invalid_argument(absl::StrCat(op, ": out_channels = ", s.out_channels,
                                             " < in_channels = ", s.in_channels,
                                             " (it only pads channels)"));
  }
}

void Validate(const SoftmaxCrossEntropySpec& s) {
  Positive("SoftmaxCrossEntropy", "batch", s.batch);
  Positive("SoftmaxCrossEntropy", "classes", s.classes);
}

void Validate(const LstmSpec& s) {
  Positive("LSTM", "seq_len", s.seq_len);
  Positive("LSTM", "batch", s.batch);
  Positive("LSTM", "input_size", s.input_size);
  Positive("LSTM", "hidden_size", s.hidden_size);
}

void Validate(const EmbeddingSpec& s) {
  Positive("Embedding", "count", s.count);
  Positive("Embedding", "vocab", s.vocab);
  Positive("Embedding", "dim", s.dim);
  if (s.vocab > (std::int64_t{1} << 24)) {
    throw std::invalid_argument(absl::StrCat("Embedding: vocab = ", s.vocab,
                                             " > 2^24: ids are stored as floats, exact to 2^24"));
  }
}

}  // namespace phub::worker
