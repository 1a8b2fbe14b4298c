// What every cuDNN op shares: the device, one stream, the cuDNN and cuBLAS handles bound to it,
// a workspace, and RAII wrappers for cuDNN's descriptors and for raw device memory.
//
// Threading: a Context and the ops made with it are used by one thread at a time (as the oneDNN
// backend's), and everything is enqueued on the one stream, so ops run in call order on the GPU
// and never concurrently with each other. That is what lets them share one workspace.
// The calling thread's current CUDA device must be the context's (Create sets it).
// Errors: every call into CUDA, cuDNN or cuBLAS is checked (checks.h) and returned as a Status;
// objects that need such a call to exist (device memory, descriptors, the context) are made by
// a factory or an Init that returns it. Nothing here throws.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <source_location>
#include <type_traits>
#include <utility>

#include "worker/backend/cudnn/checks.h"
#include "worker/tensor/tensor.h"

namespace phub::worker::cudnn {

// Device memory owned by one object (workspaces, an LSTM's weight and reserve spaces, buffers of
// ids or labels): cudaMalloc'd once, freed with its owner. Bytes, not a Tensor: it may hold ints.
class DeviceMemory {
 public:
  DeviceMemory() = default;  // none
  // `bytes` of device memory (none for 0): ResourceExhausted when the GPU is out of memory.
  static StatusOr<DeviceMemory> Allocate(std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(DeviceMemory&& other) noexcept
      : p_(std::exchange(other.p_, nullptr)), bytes_(std::exchange(other.bytes_, 0)) {}
  DeviceMemory& operator=(DeviceMemory&& other) noexcept;
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  void* get() const { return p_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  std::size_t bytes() const { return bytes_; }

 private:
  DeviceMemory(void* p, std::size_t bytes) : p_(p), bytes_(bytes) {}

  void* p_ = nullptr;
  std::size_t bytes_ = 0;
};

// A cuDNN descriptor, destroyed with the object. Null until Init creates it (a constructor
// cannot return cuDNN's failure): an op Inits each of its descriptors when it is made. A null
// one passed to cuDNN by mistake is refused by cuDNN (CUDNN_STATUS_BAD_PARAM), not a crash.
template <class T, cudnnStatus_t (*CreateFn)(T*), cudnnStatus_t (*DestroyFn)(T)>
class Descriptor {
 public:
  Descriptor() = default;
  ~Descriptor() {
    if (d_ != nullptr) DestroyFn(d_);
  }
  // Creates the cuDNN object (once); a failure names the caller's line.
  Status Init(std::source_location where = std::source_location::current()) {
    if (d_ != nullptr) return absl::OkStatus();
    const cudnnStatus_t status = CreateFn(&d_);
    if (status != CUDNN_STATUS_SUCCESS) {
      d_ = nullptr;
      return CudnnError(status, "creating a cuDNN descriptor", where.file_name(),
                        static_cast<int>(where.line()));
    }
    return absl::OkStatus();
  }
  Descriptor(Descriptor&& other) noexcept : d_(std::exchange(other.d_, nullptr)) {}
  Descriptor& operator=(Descriptor&& other) noexcept {
    std::swap(d_, other.d_);
    return *this;
  }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;

  T get() const { return d_; }
  operator T() const { return d_; }  // NOLINT: passed straight to cuDNN calls

 private:
  T d_ = nullptr;
};

using TensorDesc =
    Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvolutionDesc = Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                                   cudnnDestroyConvolutionDescriptor>;
using PoolingDesc = Descriptor<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                               cudnnDestroyPoolingDescriptor>;
using ActivationDesc = Descriptor<cudnnActivationDescriptor_t, cudnnCreateActivationDescriptor,
                                  cudnnDestroyActivationDescriptor>;
using LrnDesc =
    Descriptor<cudnnLRNDescriptor_t, cudnnCreateLRNDescriptor, cudnnDestroyLRNDescriptor>;
using DropoutDesc = Descriptor<cudnnDropoutDescriptor_t, cudnnCreateDropoutDescriptor,
                               cudnnDestroyDropoutDescriptor>;
using RnnDesc =
    Descriptor<cudnnRNNDescriptor_t, cudnnCreateRNNDescriptor, cudnnDestroyRNNDescriptor>;
using RnnDataDesc = Descriptor<cudnnRNNDataDescriptor_t, cudnnCreateRNNDataDescriptor,
                               cudnnDestroyRNNDataDescriptor>;

// cuDNN and cuBLAS take int sizes: v as an int, or InvalidArgument naming op and what.
StatusOr<int> ToInt(const char* op, const char* what, std::int64_t v);
// Makes desc (Init) a packed NCHW float32 descriptor.
Status SetNchw(TensorDesc& desc, const char* op, std::int64_t n, std::int64_t c, std::int64_t h,
               std::int64_t w);

// Scaling factors for cuDNN's "y = alpha * op(x) + beta * y" calls.
inline constexpr float kOne = 1.0f;
inline constexpr float kZero = 0.0f;

class Context {
 public:
  // FailedPrecondition ("cuDNN backend: no CUDA device: ...") when no GPU is usable,
  // InvalidArgument for a device that does not exist, else any failure of the CUDA, cuDNN or
  // cuBLAS calls that set the context up.
  static StatusOr<std::unique_ptr<Context>> Create(int device, bool allow_tf32);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  // TF32 tensor-core math allowed in convolutions, GEMMs and the LSTM (CudnnOptions).
  bool allow_tf32() const { return allow_tf32_; }
  // The math type a cuDNN descriptor gets: FMA (strict float32) unless TF32 is allowed.
  cudnnMathType_t math_type() const { return allow_tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH; }
  cudaStream_t stream() const { return stream_.get(); }
  cudnnHandle_t cudnn() const { return cudnn_.get(); }
  cublasHandle_t cublas() const { return cublas_.get(); }

  // At least `bytes` of scratch (null for 0), shared by every op of this context: they run one
  // at a time on stream(), so the largest request serves all. Growing it waits for the stream
  // first, so work already enqueued keeps its old buffer until done (ResourceExhausted if the
  // larger one does not fit). REQUIRES: the pointer is used only until the next call (ops ask
  // for it each time they run, with the size they reserved when made, which never grows it).
  StatusOr<void*> Workspace(std::size_t bytes);
  std::size_t workspace_bytes() const { return workspace_.bytes(); }

  // Waits for the stream; a failure of a kernel enqueued earlier is reported here.
  Status Synchronize();

 private:
  Context(int device, bool allow_tf32) : device_(device), allow_tf32_(allow_tf32) {}

  struct StreamDeleter {
    void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
  };
  struct CudnnDeleter {
    void operator()(cudnnHandle_t h) const { cudnnDestroy(h); }
  };
  struct CublasDeleter {
    void operator()(cublasHandle_t h) const { cublasDestroy(h); }
  };

  int device_;
  bool allow_tf32_;
  // Declared before the handles: destroyed after them.
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter> stream_;
  std::unique_ptr<std::remove_pointer_t<cudnnHandle_t>, CudnnDeleter> cudnn_;
  std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter> cublas_;
  DeviceMemory workspace_;
};

}  // namespace phub::worker::cudnn
