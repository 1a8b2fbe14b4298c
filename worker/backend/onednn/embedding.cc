// Embedding lookup on the CPU: oneDNN has no gather primitive, so a row copy per id (memcpy of
// `dim` floats) forward and a row add per id backward. Ids are checked before anything is
// written, so a bad batch leaves y and the gradient untouched.
#include <cmath>
#include <cstring>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "worker/backend/onednn/onednn_ops.h"

namespace phub::worker::onednn {
namespace {

class Embedding final : public EmbeddingOp {
 public:
  explicit Embedding(const EmbeddingSpec& s) : s_(s) {}

  void Forward(const Tensor& ids, const Tensor& table, Tensor& y) override {
    CheckShapes("Embedding forward", ids, table);
    Check("Embedding forward", "y", y, {s_.count, s_.dim});
    CheckIds(ids);
    for (std::int64_t i = 0; i < s_.count; ++i) {
      const auto row = static_cast<std::int64_t>(ids.data()[i]);
      std::memcpy(y.data() + i * s_.dim, table.data() + row * s_.dim, s_.dim * sizeof(float));
    }
  }

  void Backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) override {
    CheckShapes("Embedding backward", ids, dtable);
    Check("Embedding backward", "dy", dy, {s_.count, s_.dim});
    CheckIds(ids);
    std::memset(dtable.data(), 0, dtable.bytes());
    for (std::int64_t i = 0; i < s_.count; ++i) {
      float* to = dtable.data() + static_cast<std::int64_t>(ids.data()[i]) * s_.dim;
      const float* from = dy.data() + i * s_.dim;
      for (std::int64_t j = 0; j < s_.dim; ++j) to[j] += from[j];
    }
  }

 private:
  void CheckShapes(const char* op, const Tensor& ids, const Tensor& table) const {
    Check(op, "ids", ids, {s_.count});
    Check(op, "table", table, {s_.vocab, s_.dim});
  }

  void CheckIds(const Tensor& ids) const {
    for (std::int64_t i = 0; i < s_.count; ++i) {
      const float id = ids.data()[i];
      if (!(id >= 0 && id < static_cast<float>(s_.vocab)) || std::floor(id) != id) {
        throw std::out_of_range(absl::StrCat("Embedding: id ", id, " at position ", i,
                                             " is not a row of the table [0, ", s_.vocab,
                                             "): check the data's vocabulary size"));
      }
    }
  }

  EmbeddingSpec s_;
};

}  // namespace

std::unique_ptr<EmbeddingOp> MakeEmbedding(Context&, const EmbeddingSpec& spec) {
  Validate(spec);
  return std::make_unique<Embedding>(spec);
}

}  // namespace phub::worker::onednn
