// Embedding lookup on the GPU: neither cuDNN nor cuBLAS has a gather by index, so a row-gather
// kernel forward and a scatter-add kernel backward (kernels.h; atomics, so repeated ids sum in
// an order that may change from run to run, within float rounding). The ids are copied to the
// host and checked before any kernel indexes the table with them, as the CPU backend checks
// them: a bad id is InvalidArgument naming it, and leaves y and the gradient untouched.
// The copy is count floats, and waits for the stream.
#include <vector>

#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"

namespace phub::worker::cudnn {
namespace {

class Embedding final : public EmbeddingOp {
 public:
  Embedding(Context& ctx, const EmbeddingSpec& s)
      : ctx_(ctx), s_(s), host_ids_(static_cast<std::size_t>(s.count)) {}

  Status Forward(const Tensor& ids, const Tensor& table, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckEmbeddingForward(s_, Device::kCuda, ids, table, y));
    PHUB_RETURN_IF_ERROR(CheckIds(ids));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchEmbeddingForward(ids.data(), table.data(), y.data(), s_.count,
                                                     s_.dim, ctx_.stream()));
    return absl::OkStatus();
  }

  Status Backward(const Tensor& ids, const Tensor& dy, Tensor& dtable) override {
    PHUB_RETURN_IF_ERROR(CheckEmbeddingBackward(s_, Device::kCuda, ids, dy, dtable));
    PHUB_RETURN_IF_ERROR(CheckIds(ids));
    PHUB_RETURN_IF_CUDA_ERROR(cudaMemsetAsync(dtable.data(), 0, dtable.bytes(), ctx_.stream()));
    PHUB_RETURN_IF_CUDA_ERROR(LaunchEmbeddingBackward(ids.data(), dy.data(), dtable.data(),
                                                      s_.count, s_.dim, ctx_.stream()));
    return absl::OkStatus();
  }

 private:
  // The ids' values, read back to the host (ops_checks.h).
  Status CheckIds(const Tensor& ids) {
    PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host_ids_.data(), ids.data(), ids.bytes(),
                                              cudaMemcpyDeviceToHost, ctx_.stream()));
    PHUB_RETURN_IF_ERROR(ctx_.Synchronize());
    return CheckEmbeddingIds(s_, host_ids_);
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
