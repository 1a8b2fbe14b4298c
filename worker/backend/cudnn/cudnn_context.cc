#include "worker/backend/cudnn/cudnn_context.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_backend.h"

namespace phub::worker::cudnn {

StatusOr<DeviceMemory> DeviceMemory::Allocate(std::size_t bytes) {
  if (bytes == 0) return DeviceMemory();
  void* p = nullptr;
  PHUB_RETURN_IF_CUDA_ERROR(cudaMalloc(&p, bytes));
  return DeviceMemory(p, bytes);
}

DeviceMemory::~DeviceMemory() {
  // cudaFree waits for the device: no kernel still using the memory is left behind. Its error
  // (a runtime already unloaded at exit) cannot be reported from a destructor.
  if (p_ != nullptr) cudaFree(p_);
}

DeviceMemory& DeviceMemory::operator=(DeviceMemory&& other) noexcept {
  std::swap(p_, other.p_);
  std::swap(bytes_, other.bytes_);
  return *this;
}

StatusOr<int> ToInt(const char* op, const char* what, std::int64_t v) {
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": ", what, " = ", v, " does not fit the int that cuDNN and cuBLAS take"));
  }
  return static_cast<int>(v);
}

Status SetNchw(TensorDesc& desc, const char* op, std::int64_t n, std::int64_t c, std::int64_t h,
               std::int64_t w) {
  PHUB_ASSIGN_OR_RETURN(const int in, ToInt(op, "N", n));
  PHUB_ASSIGN_OR_RETURN(const int ic, ToInt(op, "C", c));
  PHUB_ASSIGN_OR_RETURN(const int ih, ToInt(op, "H", h));
  PHUB_ASSIGN_OR_RETURN(const int iw, ToInt(op, "W", w));
  PHUB_RETURN_IF_ERROR(desc.Init());
  PHUB_RETURN_IF_CUDNN_ERROR(
      cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, in, ic, ih, iw));
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<Context>> Context::Create(int device, bool allow_tf32) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) return absl::FailedPreconditionError("cuDNN backend: no CUDA device: " + why);
  if (device < 0 || device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN backend: device ", device, " does not exist (", count, " visible)"));
  }
  std::unique_ptr<Context> ctx(new Context(device, allow_tf32));
  PHUB_RETURN_IF_CUDA_ERROR(cudaSetDevice(device));
  // A blocking stream (not cudaStreamNonBlocking): the tensor allocator orders its
  // allocations and frees on the legacy default stream, which such a stream waits for and
  // which waits for it (tensor_allocator.cc).
  cudaStream_t stream = nullptr;
  PHUB_RETURN_IF_CUDA_ERROR(cudaStreamCreate(&stream));
  ctx->stream_.reset(stream);
  cudnnHandle_t cudnn = nullptr;
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnCreate(&cudnn));
  ctx->cudnn_.reset(cudnn);
  PHUB_RETURN_IF_CUDNN_ERROR(cudnnSetStream(cudnn, stream));
  cublasHandle_t cublas = nullptr;
  PHUB_RETURN_IF_CUBLAS_ERROR(cublasCreate(&cublas));
  ctx->cublas_.reset(cublas);
  PHUB_RETURN_IF_CUBLAS_ERROR(cublasSetStream(cublas, stream));
  // cuBLAS's default math never uses TF32 for float32 GEMMs (unless NVIDIA_TF32_OVERRIDE=1).
  PHUB_RETURN_IF_CUBLAS_ERROR(
      cublasSetMathMode(cublas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  return ctx;
}

Context::~Context() {
  // Ops may still run: let them finish before the handles and the stream go.
  if (stream_) cudaStreamSynchronize(stream_.get());
}

Status Context::Synchronize() {
  PHUB_RETURN_IF_CUDA_ERROR(cudaStreamSynchronize(stream()));
  return absl::OkStatus();
}

StatusOr<void*> Context::Workspace(std::size_t bytes) {
  if (bytes > workspace_.bytes()) {
    PHUB_RETURN_IF_ERROR(Synchronize());
    workspace_ = DeviceMemory();  // free first: the old and new buffers need not fit together
    PHUB_ASSIGN_OR_RETURN(workspace_, DeviceMemory::Allocate(bytes));
  }
  return bytes == 0 ? nullptr : workspace_.get();
}

}  // namespace phub::worker::cudnn
