#include "worker/backend/cudnn/cudnn_context.h"

#include <limits>
#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "worker/backend/cudnn/cudnn_backend.h"

namespace phub::worker::cudnn {

DeviceMemory::DeviceMemory(std::size_t bytes) : bytes_(bytes) {
  if (bytes > 0) PHUB_CUDA_CHECK(cudaMalloc(&p_, bytes));
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

int ToInt(const char* op, const char* what, std::int64_t v) {
  if (v < 0 || v > std::numeric_limits<int>::max()) {
    throw std::invalid_argument(
        absl::StrCat(op, ": ", what, " = ", v, " does not fit the int that cuDNN and cuBLAS take"));
  }
  return static_cast<int>(v);
}

void SetNchw(const TensorDesc& desc, const char* op, std::int64_t n, std::int64_t c, std::int64_t h,
             std::int64_t w) {
  PHUB_CUDNN_CHECK(cudnnSetTensor4dDescriptor(desc, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                              ToInt(op, "N", n), ToInt(op, "C", c),
                                              ToInt(op, "H", h), ToInt(op, "W", w)));
}

void Check(const char* op, const char* arg, const Tensor& t, std::int64_t numel) {
  if (t.device() != Device::kCuda || t.layout() != Layout::kNCHW || t.numel() != numel ||
      (numel > 0 && t.data() == nullptr)) {
    throw std::invalid_argument(absl::StrCat(op, ": ", arg, " is ", t.ToString(), ", expected ",
                                             numel, " elements, cuda, NCHW"));
  }
}

Context::Context(int device, bool allow_tf32) : device_(device), allow_tf32_(allow_tf32) {
  std::string why;
  const int count = CudaDeviceCount(&why);
  if (count == 0) throw std::runtime_error("cuDNN backend: no CUDA device: " + why);
  if (device < 0 || device >= count) {
    throw std::invalid_argument(
        absl::StrCat("cuDNN backend: device ", device, " does not exist (", count, " visible)"));
  }
  PHUB_CUDA_CHECK(cudaSetDevice(device));
  // A blocking stream (not cudaStreamNonBlocking): the tensor allocator orders its
  // allocations and frees on the legacy default stream, which such a stream waits for and
  // which waits for it (tensor_allocator.cc).
  cudaStream_t stream = nullptr;
  PHUB_CUDA_CHECK(cudaStreamCreate(&stream));
  stream_.reset(stream);
  cudnnHandle_t cudnn = nullptr;
  PHUB_CUDNN_CHECK(cudnnCreate(&cudnn));
  cudnn_.reset(cudnn);
  PHUB_CUDNN_CHECK(cudnnSetStream(cudnn, stream));
  cublasHandle_t cublas = nullptr;
  PHUB_CUBLAS_CHECK(cublasCreate(&cublas));
  cublas_.reset(cublas);
  PHUB_CUBLAS_CHECK(cublasSetStream(cublas, stream));
  // cuBLAS's default math never uses TF32 for float32 GEMMs (unless NVIDIA_TF32_OVERRIDE=1).
  PHUB_CUBLAS_CHECK(
      cublasSetMathMode(cublas, allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
}

Context::~Context() {
  // Ops may still run: let them finish before the handles and the stream go.
  if (stream_) cudaStreamSynchronize(stream_.get());
}

void* Context::Workspace(std::size_t bytes) {
  if (bytes > workspace_.bytes()) {
    Synchronize();
    workspace_ = DeviceMemory();  // free first: the old and new buffers need not fit together
    workspace_ = DeviceMemory(bytes);
  }
  return bytes == 0 ? nullptr : workspace_.get();
}

}  // namespace phub::worker::cudnn
