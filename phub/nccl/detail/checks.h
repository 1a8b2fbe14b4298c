// Internal to phub/nccl: checked wrappers that turn CUDA runtime and NCCL error codes into a
// Status naming the call, its location, the library's own error text and what to do (in the
// manner of nccl's src/include/checks.h). Include only from .cc files: it pulls in the CUDA
// headers, which the public headers of phub/nccl keep out of their users' builds.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include "phub/common/status.h"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 14, 0)
#error "phub/nccl needs NCCL >= 2.14 (non-blocking communicators, ncclCommFinalize, ncclAvg)"
#endif

namespace phub::nccl::detail {

// `call` is the source text of the failed call; file and line are where it was made.
// Clears CUDA's last-error slot, so the failure is reported once.
Status CudaError(cudaError_t error, const char* call, const char* file, int line);
// `comm` may be null (before a communicator exists); if not, NCCL's last message for it is
// appended. ncclInProgress is not an error and must not be passed here.
Status NcclError(ncclResult_t result, ncclComm_t comm, const char* call, const char* file,
                 int line);

}  // namespace phub::nccl::detail

// Returns a Status from the enclosing function if the CUDA runtime call fails.
#define PHUB_CUDA_RETURN_IF_ERROR(call)                                                    \
  do {                                                                                     \
    const cudaError_t phub_cuda_error_ = (call);                                           \
    if (phub_cuda_error_ != cudaSuccess) {                                                 \
      return ::phub::nccl::detail::CudaError(phub_cuda_error_, #call, __FILE__, __LINE__); \
    }                                                                                      \
  } while (0)
