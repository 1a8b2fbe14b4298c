// Embedding lookup on the CPU: oneDNN has no gather primitive, so a row copy per id (memcpy of
// `dim` floats) forward and a row add per id backward. Ids are checked before anything is
// written, so a bad batch leaves y and the gradient untouched.
#include <cstring>

#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

class Embedding final : public EmbeddingOp {
 public:
  explicit Embedding(const EmbeddingSpec& s) : s_(s) {}

  Status Forward(const Tensor& ids, const Tensor& table, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckEmbeddingForward(s_, Device::kCpu, ids, table, y));
    PHUB_RETURN_IF_ERROR(CheckEmbeddingIds(s_, ids.span()));
    for (std::int64_t i = 0; i < s_.count; ++i) {
      const auto row = static_cast<std::int64_t>(ids.data()[i]);
      std::memcpy(y.data() + i * s_.dim, table.data() + row * s_.dim, s_.dim * sizeof(float));
    }
    return absl::OkStatus();
  }

  Status Backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) override {
    PHUB_RETURN_IF_ERROR(CheckEmbeddingBackward(s_, Device::kCpu, ids, dy, dtable));
    PHUB_RETURN_IF_ERROR(CheckEmbeddingIds(s_, ids.span()));
    std::memset(dtable.data(), 0, dtable.bytes());
    for (std::int64_t i = 0; i < s_.count; ++i) {
      float* to = dtable.data() + static_cast<std::int64_t>(ids.data()[i]) * s_.dim;
      const float* from = dy.data() + i * s_.dim;
      for (std::int64_t j = 0; j < s_.dim; ++j) to[j] += from[j];
    }
    return absl::OkStatus();
  }

 private:
  EmbeddingSpec s_;
};

}  // namespace

StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(Context&, const EmbeddingSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return std::make_unique<Embedding>(spec);
}

}  // namespace phub::worker::onednn
