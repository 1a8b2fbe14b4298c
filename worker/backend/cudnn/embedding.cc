// Embedding lookup on the GPU: neither cuDNN nor cuBLAS has a gather by index, so a row-gather
// kernel forward and a scatter-add kernel backward (kernels.h; atomics, so repeated ids sum in
// an order that may change from run to run, within float rounding). The ids are copied to the
// host and checked before any kernel indexes the table with them, as the CPU backend checks
// them: a bad id is InvalidArgument naming it, and leaves y and the gradient untouched.
// The copy is count floats, and waits for the stream.
#include <cmath>
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

  Status Forward(const Tensor& ids, const Tensor& table, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckShapes("Embedding forward", ids, table));
    PHUB_RETURN_IF_ERROR(Check("Embedding forward", "y", y, s_.count * s_.dim));
    PHUB_RETURN_IF_ERROR(CheckIds(ids));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchEmbeddingForward(ids.data(), table.data(), y.data(), s_.count,
                                                     s_.dim, ctx_.stream()));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) override {
    PHUB_RETURN_IF_ERROR(CheckShapes("Embedding backward", ids, dtable));
    PHUB_RETURN_IF_ERROR(Check("Embedding backward", "dy", dy, s_.count * s_.dim));
    PHUB_RETURN_IF_ERROR(CheckIds(ids));
    PHUB_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(dtable.data(), 0, dtable.bytes(), ctx_.stream()));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchEmbeddingBackward(ids.data(), dy.data(), dtable.data(),
                                                      s_.count, s_.dim, ctx_.stream()));
    return absl::OkStatus();
  }

 private:
  Status CheckShapes(const char* op, const Tensor& ids, const Tensor& table) const {
    PHUB_RETURN_IF_ERROR(Check(op, "ids", ids, s_.count));
    return Check(op, "table", table, s_.vocab * s_.dim);
  }

  Status CheckIds(const Tensor& ids) {
    PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host_ids_.data(), ids.data(), ids.bytes(),
                                              cudaMemcpyDeviceToHost, ctx_.stream()));
    PHUB_RETURN_IF_ERROR(ctx_.Synchronize());
    for (std::int64_t i = 0; i < s_.count; ++i) {
      const float id = host_ids_[static_cast<std::size_t>(i)];
      if (!(id >= 0 && id < static_cast<float>(s_.vocab)) || std::floor(id) != id) {
        return absl::InvalidArgumentError(absl::StrCat("Embedding: id ", id, " at position ", i,
                                                       " is not a row of the table [0, ", s_.vocab,
                                                       "): check the data's vocabulary size"));
      }
    }
    return absl::OkStatus();
  }

  Context& ctx_;
  EmbeddingSpec s_;
  std::vector<float> host_ids_;
};

}  // namespace

StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(Context& ctx, const EmbeddingSpec& spec) {
  PHUB_RETURN_IF_ERROR(Validate(spec));
  return std::make_unique<Embedding>(ctx, spec);
}

}  // namespace phub::worker::cudnn
