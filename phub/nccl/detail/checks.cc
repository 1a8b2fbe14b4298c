#include "phub/nccl/detail/checks.h"


#include "absl/strings/str_cat.h"
#include "phub/common/cuda_error_text.h"

namespace phub::nccl::detail {

Status CudaError(cudaError_t error, const char* call, const char* file, int line) {
  (void)cudaGetLastError();  // a non-sticky error would otherwise be seen again by later calls
  const std::string what =
      absl::StrCat(call, " failed at ", RepoRelativePath(file), ":", line, ": ",
                   cudaGetErrorName(error), " (", cudaGetErrorString(error), ")",
                   kCudaUnderAsanHint);
  switch (error) {
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(absl::StrCat(
          what,
          ": not enough GPU memory; free some (nvidia-smi shows who holds it) or use a "
          "smaller buffer"));
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidDevicePointer:
      return absl::InvalidArgumentError(
          absl::StrCat(what,
                       ": check the device ordinal and that the pointer is memory of this rank's "
                       "device (cudaMalloc on the same device)"));
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
      return absl::FailedPreconditionError(absl::StrCat(
          what,
          ": no usable GPU; check nvidia-smi, the NVIDIA driver version (it must support "
          "CUDA ",
          CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10, ") and CUDA_VISIBLE_DEVICES"));
    default:
      return absl::InternalError(
          absl::StrCat(what,
                       ": the GPU or the CUDA runtime failed; check nvidia-smi and dmesg "
                       "(Xid errors) and restart the process"));
  }
}

Status NcclError(ncclResult_t result, ncclComm_t comm, const char* call, const char* file,
                 int line) {
  const char* last = ncclGetLastError(comm);
  std::string what = absl::StrCat(call, " failed at ", RepoRelativePath(file), ":", line, ": ",
                                  ncclGetErrorString(result));
  if (last != nullptr && last[0] != '\0') absl::StrAppend(&what, " (", last, ")");
  constexpr const char* kDebug = "; NCCL_DEBUG=WARN (or INFO) prints NCCL's own log";
  switch (result) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": every rank must make the same calls with the same count, on its own device",
          kDebug));
    case ncclRemoteError:
      return absl::UnavailableError(
          absl::StrCat(what, ": a peer rank failed or left; restart the job", kDebug));
    case ncclSystemError:
      return absl::UnavailableError(
          absl::StrCat(what,
                       ": a system call or the network failed (a peer may have died); check "
                       "NCCL_SOCKET_IFNAME and that the ranks can reach each other",
                       kDebug));
    default:  // ncclUnhandledCudaError, ncclInternalError
      return absl::InternalError(
          absl::StrCat(what, ": check the GPU with nvidia-smi and restart the process", kDebug));
  }
}

}  // namespace phub::nccl::detail
