#include "worker/backend/cudnn/cudnn_backend.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "phub/kernels/cuda/optimizer_step.h"
#include "phub/kernels/optimizer_update.h"
#include "phub/staging/cuda_copy_engine.h"
#include "worker/backend/cudnn/cudnn_ops.h"
#include "worker/backend/cudnn/kernels.h"
#include "worker/backend/cudnn/tensor_allocator.h"

namespace phub::worker {
namespace {

using cudnn::Context;

// "cuDNN 9.19.0 + cuBLAS 13.1.0 (NVIDIA H100 80GB HBM3, sm_90)": the versions loaded at run
// time, which may differ from the headers'.
StatusOr<std::string> Description(const Context& ctx) {
  const std::size_t v = cudnnGetVersion();  // major * 10000 + minor * 100 + patch since 9.0
  int cublas = 0;
  PHUB_RETURN_IF_CUBLAS_ERROR(cublasGetVersion(ctx.cublas(), &cublas));
  cudaDeviceProp prop{};
  PHUB_RETURN_IF_CUDA_ERROR(cudaGetDeviceProperties(&prop, ctx.device()));
  return absl::StrCat("cuDNN ", v / 10000, ".", v % 10000 / 100, ".", v % 100, " + cuBLAS ",
                      cublas / 10000, ".", cublas % 10000 / 100, ".", cublas % 100, " (", prop.name,
                      ", sm_", prop.major, prop.minor, ctx.allow_tf32() ? ", TF32 allowed" : "",
                      ")");
}

// A tensor of this backend's: cuda, NCHW, `numel` elements (ops_checks.h).
Status CheckDevice(const char* op, const char* arg, const Tensor& t, std::int64_t numel) {
  return CheckTensor(op, arg, t, Device::kCuda, Shape{numel});
}

Status CheckHost(const char* op, const Tensor& host, std::int64_t numel) {
  if (host.device() != Device::kCpu || host.numel() != numel) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": host tensor is ", host.ToString(),
                                                   ", expected ", numel, " elements on the cpu"));
  }
  return absl::OkStatus();
}

class CudnnBackend final : public Backend {
 public:
  CudnnBackend(std::unique_ptr<Context> ctx, std::string description)
      : ctx_(std::move(ctx)), description_(std::move(description)) {}

  Device device() const override { return Device::kCuda; }
  std::string Describe() const override { return description_; }

  StatusOr<std::unique_ptr<Conv2dOp>> MakeConv2d(const Conv2dSpec& s) override {
    return cudnn::MakeConv2d(*ctx_, s);
  }
  StatusOr<std::unique_ptr<LinearOp>> MakeLinear(const LinearSpec& s) override {
    return cudnn::MakeLinear(*ctx_, s);
  }
  StatusOr<std::unique_ptr<BatchNormOp>> MakeBatchNorm(const BatchNormSpec& s) override {
    return cudnn::MakeBatchNorm(*ctx_, s);
  }
  StatusOr<std::unique_ptr<ActivationOp>> MakeActivation(ActivationKind kind,
                                                         const Shape& shape) override {
    return cudnn::MakeActivation(*ctx_, kind, shape);
  }
  StatusOr<std::unique_ptr<PoolOp>> MakePool(const PoolSpec& s) override {
    return cudnn::MakePool(*ctx_, s);
  }
  StatusOr<std::unique_ptr<DropoutOp>> MakeDropout(const Shape& shape, float p) override {
    return cudnn::MakeDropout(*ctx_, shape, p);
  }
  StatusOr<std::unique_ptr<ShortcutOp>> MakeShortcut(const ShortcutSpec& s) override {
    return cudnn::MakeShortcut(*ctx_, s);
  }
  StatusOr<std::unique_ptr<LrnOp>> MakeLrn(const LrnSpec& s) override {
    return cudnn::MakeLrn(*ctx_, s);
  }
  StatusOr<std::unique_ptr<SoftmaxCrossEntropyOp>> MakeSoftmaxCrossEntropy(
      const SoftmaxCrossEntropySpec& s) override {
    return cudnn::MakeSoftmaxCrossEntropy(*ctx_, s);
  }
  StatusOr<std::unique_ptr<LstmOp>> MakeLstm(const LstmSpec& s) override {
    return cudnn::MakeLstm(*ctx_, s);
  }
  StatusOr<std::unique_ptr<EmbeddingOp>> MakeEmbedding(const EmbeddingSpec& s) override {
    return cudnn::MakeEmbedding(*ctx_, s);
  }

  // y = a + b as one copy and one cuBLAS axpy (y += 1 * x, exactly rounded like a + b), which
  // also covers y aliasing a or b without a kernel of our own.
  Status Add(const Tensor& a, const Tensor& b, Tensor& y) override {
    const std::int64_t n = a.numel();
    PHUB_RETURN_IF_ERROR(CheckDevice("Add", "a", a, n));
    PHUB_RETURN_IF_ERROR(CheckDevice("Add", "b", b, n));
    PHUB_RETURN_IF_ERROR(CheckDevice("Add", "y", y, n));
    if (y.data() == a.data()) return Axpy(b, y);
    if (y.data() == b.data()) return Axpy(a, y);
    PHUB_RETURN_IF_ERROR(Copy(a, y));
    return Axpy(b, y);
  }

  Status OptimizerStep(const Tensor& grad, Tensor& weights, std::span<Tensor> state,
                       const kernels::OptimizerConfig& config, std::uint64_t step) override {
    PHUB_RETURN_IF_ERROR(CheckOptimizerStep(Device::kCuda, grad, weights, state, config, step));
    return kernels::cuda::LaunchOptimizerStep(
        grad.data(), weights.data(), state.size() > 0 ? state[0].data() : nullptr,
        state.size() > 1 ? state[1].data() : nullptr, weights.numel(), config.kind,
        kernels::Prepare(1, config, step), ctx_->stream());
  }

  Status Accumulate(const Tensor& x, Tensor& y) override {
    PHUB_RETURN_IF_ERROR(CheckDevice("Accumulate", "x", x, x.numel()));
    PHUB_RETURN_IF_ERROR(CheckDevice("Accumulate", "y", y, x.numel()));
    return Axpy(x, y);
  }

  StatusOr<Tensor> Allocate(const Shape& shape) override {
    return Tensor::Allocate(shape, Device::kCuda);
  }

  Status CopyFromHost(const Tensor& host, Tensor& mine) override {
    PHUB_RETURN_IF_ERROR(CheckHost("CopyFromHost", host, mine.numel()));
    PHUB_RETURN_IF_ERROR(CheckDevice("CopyFromHost", "destination", mine, host.numel()));
    // From pageable memory this returns once the bytes are staged: the host tensor may change.
    if (host.numel() > 0) {
      PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(mine.data(), host.data(), host.bytes(),
                                                cudaMemcpyHostToDevice, ctx_->stream()));
    }
    return absl::OkStatus();
  }

  Status CopyToHost(const Tensor& mine, Tensor& host) override {
    PHUB_RETURN_IF_ERROR(CheckDevice("CopyToHost", "source", mine, host.numel()));
    PHUB_RETURN_IF_ERROR(CheckHost("CopyToHost", host, mine.numel()));
    if (mine.numel() > 0) {
      PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(host.data(), mine.data(), mine.bytes(),
                                                cudaMemcpyDeviceToHost, ctx_->stream()));
    }
    return ctx_->Synchronize();  // the caller reads the host tensor next
  }

  Status Copy(const Tensor& from, Tensor& to) override {
    PHUB_RETURN_IF_ERROR(CheckDevice("Copy", "source", from, from.numel()));
    PHUB_RETURN_IF_ERROR(CheckDevice("Copy", "destination", to, from.numel()));
    if (from.numel() > 0 && from.data() != to.data()) {
      PHUB_RETURN_IF_CUDA_ERROR(cudaMemcpyAsync(to.data(), from.data(), from.bytes(),
                                                cudaMemcpyDeviceToDevice, ctx_->stream()));
    }
    return absl::OkStatus();
  }

  Status Synchronize() override { return ctx_->Synchronize(); }
  void* stream() const override { return ctx_->stream(); }
  StatusOr<std::unique_ptr<staging::CopyEngine>> MakeCopyEngine() override {
    return staging::MakeCudaCopyEngine({.device = ctx_->device()});
  }

 private:
  Status Axpy(const Tensor& x, Tensor& y) {
    if (x.numel() == 0) return absl::OkStatus();
    PHUB_ASSIGN_OR_RETURN(const int n, cudnn::ToInt("Add", "element count", x.numel()));
    PHUB_RETURN_IF_CUBLAS_ERROR(
        cublasSaxpy(ctx_->cublas(), n, &cudnn::kOne, x.data(), 1, y.data(), 1));
    return absl::OkStatus();
  }

  std::unique_ptr<Context> ctx_;  // ops keep a reference: it never moves
  std::string description_;
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeCudnnBackend(const CudnnOptions& options) {
  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<Context> ctx,
                        Context::Create(options.device, options.allow_tf32));
  PHUB_ASSIGN_OR_RETURN(std::string description, Description(*ctx));
  PHUB_RETURN_IF_ERROR(cudnn::InstallTensorAllocator(options.device));
  return std::make_unique<CudnnBackend>(std::move(ctx), std::move(description));
}

StatusOr<std::unique_ptr<Backend>> MakeCudnnBackend(int device) {
  return MakeCudnnBackend(CudnnOptions{.device = device});
}

int CudaDeviceCount(std::string* why) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    if (why != nullptr) {
      const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
      *why = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(error), " (",
                          cudaGetErrorString(error),
                          "); CUDA_VISIBLE_DEVICES=", visible != nullptr ? visible : "(unset)");
    }
    return 0;
  }
  if (count == 0 && why != nullptr) *why = "cudaGetDeviceCount found 0 devices";
  return count;
}

}  // namespace phub::worker
