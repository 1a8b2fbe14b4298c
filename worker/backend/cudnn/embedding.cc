// Embedding lookup on the GPU: neither cuDNN nor cuBLAS has a gather by index, so a row-gather
// kernel forward and a scatter-add kernel backward (kernels.h; atomics, so repeated ids sum in
// an order that may change from run to run, within float rounding). The ids are copied to the
// host and checked before any kernel indexes the table with them, as the CPU backend checks
// them: a bad id throws std::out_of_range naming it, and leaves y and the gradient untouched.
// The copy is count floats, and waits for the stream.
#include <cmath>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class Embedding final : public EmbeddingOp {
 public:
  Embedding(Context& ctx, const EmbeddingSpec& s)
      : ctx_(ctx), s_(s), host_ids_(static_cast<std::size_t>(s.count)) {}

  void Forward(const Tensor& ids, const Tensor& table, Tensor& y) override {
    CheckShapes("Embedding forward", ids, table);
    Check("Embedding forward", "y", y, s_.count * s_.dim);
    CheckIds(ids);
    PHUB_CUDA_CHECK(LaunchEmbeddingForward(ids.data(), table.data(), y.data(), s_.count, s_.dim,
                                           ctx_.stream()));
  }

  void Backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) override {
    CheckShapes("Embedding backward", ids, dtable);
    Check("Embedding backward", "dy", dy, s_.count * s_.dim);
    CheckIds(ids);
    PHUB_CUDA_CHECK(cudaMemsetAsync(dtable.data(), 0, dtable.bytes(), ctx_.stream()));
    PHUB_CUDA_CHECK(LaunchEmbeddingBackward(ids.data(), dy.data(), dtable.data(), s_.count, s_.dim,
                                            ctx_.stream()));
  }

 private:
  void CheckShapes(const char* op, const Tensor& ids, const Tensor& table) const {
    Check(op, "ids", ids, s_.count);
    Check(op, "table", table, s_.vocab * s_.dim);
  }

  void CheckIds(const Tensor& ids) {
    PHUB_CUDA_CHECK(cudaMemcpyAsync(host_ids_.data(), ids.data(), ids.bytes(),
                                    cudaMemcpyDeviceToHost, ctx_.stream()));
    ctx_.Synchronize();
    for (std::int64_t i = 0; i < s_.count; ++i) {
      const float id = host_ids_[static_cast<std::size_t>(i)];
      if (!(id >= 0 && id < static_cast<float>(s_.vocab)) || std::floor(id) != id) {
        throw std::out_of_range(absl::StrCat("Embedding: id ", id, " at position ", i,
                                             " is not a row of the table [0, ", s_.vocab,
                                             "): check the data's vocabulary size"));
      }
    }
  }

  Context& ctx_;
  EmbeddingSpec s_;
  std::vector<float> host_ids_;
};

}  // namespace

std::unique_ptr<EmbeddingOp> MakeEmbedding(Context& ctx, const EmbeddingSpec& spec) {
  Validate(spec);
  return std::make_unique<Embedding>(ctx, spec);
}

}  // namespace phub::worker::cudnn
