// Embedding lookup on the CPU: oneDNN has no gather primitive, so a row copy per id (memcpy of
// `dim` floats) forward and a row add per id backward. Ids are checked before anything is
// written, so a bad batch leaves y and the gradient untouched.
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

class Embedding final : public EmbeddingOp {
 public:
  explicit Embedding(const EmbeddingSpec& s) : s_(s) {}

  Status Forward(const Tensor& ids, const Tensor& table, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckShapes("Embedding forward", ids, table));
    PHUB_RETURN_IF_ERROR(Check("Embedding forward", "y", y, {s_.count, s_.dim}));
    PHUB_RETURN_IF_ERROR(CheckIds(ids));
    for (std::int64_t i = 0; i < s_.count; ++i) {
      const auto row = static_cast<std::int64_t>(ids.data()[i]);
      std::memcpy(y.data() + i * s_.dim, table.data() + row * s_.dim, s_.dim * sizeof(float));
    }
    return absl::OkStatus();
  }

  Status Backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) override {
    PHUB_RETURN_IF_ERROR(CheckShapes("Embedding backward", ids, dtable));
    PHUB_RETURN_IF_ERROR(Check("Embedding backward", "dy", dy, {s_.count, s_.dim}));
    PHUB_RETURN_IF_ERROR(CheckIds(ids));
    std::memset(dtable.data(), 0, dtable.bytes());
    for (std::int64_t i = 0; i < s_.count; ++i) {
      float* to = dtable.data() + static_cast<std::int64_t>(ids.data()[i]) * s_.dim;
      const float* from = dy.data() + i * s_.dim;
      for (std::int64_t j = 0; j < s_.dim; ++j) to[j] += from[j];
    }
    return absl::OkStatus();
  }

 private:
  Status CheckShapes(const char* op, const Tensor& ids, const Tensor& table) const {
    PHUB_RETURN_IF_ERROR(Check(op, "ids", ids, {s_.count}));
    return Check(op, "table", table, {s_.vocab, s_.dim});
  }

  Status CheckIds(const Tensor& ids) const {
    for (std::int64_t i = 0; i < s_.count; ++i) {
      const float id = ids.data()[i];
      if (!(id >= 0 && id < static_cast<float>(s_.vocab)) || std::floor(id) != id) {
        return absl::InvalidArgumentError(absl::StrCat("Embedding: id ", id, " at position ", i,
                                                       " is not a row of the table [0, ", s_.vocab,
                                                       "): check the data's vocabulary size"));
      }
    }
    return absl::OkStatus();
  }

  EmbeddingSpec s_;
};

}  // namespace

StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(Context&, const EmbeddingSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return std::make_unique<Embedding>(spec);
}

}  // namespace phub::worker::onednn
