// Internal to worker/backend/cudnn: checked calls into the CUDA runtime, cuDNN and cuBLAS, in
// the manner of nccl's src/include/checks.h. A failed call throws std::runtime_error naming the
// call as written, where it was made (file:line) and the library's own error name and text
// (cuDNN adds its last detailed message), so a failure deep in a model says which op and why.
// Exceptions, not Status: the Backend/op interfaces (ops.h) report errors by throwing, as the
// oneDNN backend's do.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

namespace phub::worker::cudnn {

// The messages, separately so the tests can check them without a GPU.
std::string CudaErrorMessage(cudaError_t error, const char* call, const char* file, int line);
std::string CudnnErrorMessage(cudnnStatus_t status, const char* call, const char* file, int line);
std::string CublasErrorMessage(cublasStatus_t status, const char* call, const char* file, int line);

// Throw std::runtime_error with the message above. The CUDA one first clears the runtime's
// last-error slot so that a non-sticky error is reported once, not again by the next call.
[[noreturn]] void ThrowCudaError(cudaError_t error, const char* call, const char* file, int line);
[[noreturn]] void ThrowCudnnError(cudnnStatus_t status, const char* call, const char* file,
                                  int line);
[[noreturn]] void ThrowCublasError(cublasStatus_t status, const char* call, const char* file,
                                   int line);

}  // namespace phub::worker::cudnn

#define PHUB_CUDA_CHECK(call)                                                             \
  do {                                                                                    \
    const cudaError_t phub_cuda_error_ = (call);                                          \
    if (phub_cuda_error_ != cudaSuccess) [[unlikely]] {                                   \
      ::phub::worker::cudnn::ThrowCudaError(phub_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                     \
  } while (0)

#define PHUB_CUDNN_CHECK(call)                                                               \
  do {                                                                                       \
    const cudnnStatus_t phub_cudnn_status_ = (call);                                         \
    if (phub_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] {                           \
      ::phub::worker::cudnn::ThrowCudnnError(phub_cudnn_status_, #call, __FILE__, __LINE__); \
    }                                                                                        \
  } while (0)

#define PHUB_CUBLAS_CHECK(call)                                                                \
  do {                                                                                         \
    const cublasStatus_t phub_cublas_status_ = (call);                                         \
    if (phub_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                           \
      ::phub::worker::cudnn::ThrowCublasError(phub_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                          \
  } while (0)
