// Internal to worker/backend/cudnn: checked calls into the CUDA runtime, cuDNN and cuBLAS, in
// the manner of nccl's src/include/checks.h (and phub/nccl/detail/checks.h). A failed call
// returns a Status from the enclosing function naming the call as written, where it was made
// (file:line), the library's own error name and text (cuDNN adds its last detailed message) and
// what to do, so a failure deep in a model says which op and why. Codes:
//   ResourceExhausted  out of GPU (or host) memory: a smaller batch or model
//   FailedPrecondition no usable GPU, driver or library (nothing this process can fix)
//   InvalidArgument    the library refused a parameter (a shape or size it cannot take)
//   Unimplemented      the library does not support this configuration
//   Internal           the GPU or the library failed (or a bug here)
// Nothing here throws. Include only from this backend's .cc files (it pulls in CUDA headers).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "phub/common/status.h"

namespace phub::worker::cudnn {

// The messages, separately so the tests can check them without a GPU.
std::string CudaErrorMessage(cudaError_t error, const char* call, const char* file, int line);
std::string CudnnErrorMessage(cudnnStatus_t status, const char* call, const char* file, int line);
std::string CublasErrorMessage(cublasStatus_t status, const char* call, const char* file, int line);

// The Status for a failed call: the message above with the code of the table at the top. The
// CUDA one first clears the runtime's last-error slot so that a non-sticky error is reported
// once, not again by the next call.
Status CudaError(cudaError_t error, const char* call, const char* file, int line);
Status CudnnError(cudnnStatus_t status, const char* call, const char* file, int line);
Status CublasError(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace phub::worker::cudnn

// Each returns the Status above from the enclosing function (which returns Status or
// StatusOr<T>) when `call` fails.
#define PHUB_RETURN_IF_CUDA_ERROR(call)                                                     \
  do {                                                                                      \
    const cudaError_t phub_cuda_error_ = (call);                                            \
    if (phub_cuda_error_ != cudaSuccess) [[unlikely]] {                                     \
      return ::phub::worker::cudnn::CudaError(phub_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                       \
  } while (0)

#define PHUB_RETURN_IF_CUDNN_ERROR(call)                                                       \
  do {                                                                                         \
    const cudnnStatus_t phub_cudnn_status_ = (call);                                           \
    if (phub_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]] {                             \
      return ::phub::worker::cudnn::CudnnError(phub_cudnn_status_, #call, __FILE__, __LINE__); \
    }                                                                                          \
  } while (0)

#define PHUB_RETURN_IF_CUBLAS_ERROR(call)                                                        \
  do {                                                                                           \
    const cublasStatus_t phub_cublas_status_ = (call);                                           \
    if (phub_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                             \
      return ::phub::worker::cudnn::CublasError(phub_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                            \
  } while (0)
