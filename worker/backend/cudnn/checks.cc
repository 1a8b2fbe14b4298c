#include "worker/backend/cudnn/checks.h"

#include "absl/strings/str_cat.h"
#include "phub/common/cuda_error_text.h"

namespace phub::worker::cudnn {
namespace {

constexpr const char* kOutOfMemory =
    ": out of GPU memory (a smaller batch, or nvidia-smi shows who holds it)";
constexpr const char* kGpuFailed =
    ": the GPU or the library failed; check nvidia-smi and dmesg (Xid errors) and restart the "
    "process";

bool IsNoGpu(cudaError_t error) {
  switch (error) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::string CudaErrorMessage(cudaError_t error, const char* call, const char* file, int line) {
  std::string hint;
  if (error == cudaErrorMemoryAllocation) {
    hint = kOutOfMemory;
  } else if (IsNoGpu(error)) {
    hint = absl::StrCat(": no usable GPU; check nvidia-smi, the driver (it must support CUDA ",
                        CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10,
                        ") and CUDA_VISIBLE_DEVICES", kCudaUnderAsanHint);
  }
  return absl::StrCat(call, " failed at ", RepoRelativePath(file), ":", line, ": ",
                      cudaGetErrorName(error), " (", cudaGetErrorString(error), ")", hint);
}

std::string CudnnErrorMessage(cudnnStatus_t status, const char* call, const char* file, int line) {
  std::string what = absl::StrCat(call, " failed at ", RepoRelativePath(file), ":", line, ": ",
                                  cudnnGetErrorString(status));
  // cuDNN 9 keeps a thread-local detailed message for the last failure (which argument, why).
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0') absl::StrAppend(&what, " (", detail, ")");
  return what;
}

std::string CublasErrorMessage(cublasStatus_t status, const char* call, const char* file,
                               int line) {
  return absl::StrCat(call, " failed at ", RepoRelativePath(file), ":", line, ": ",
                      cublasGetStatusName(status), " (", cublasGetStatusString(status), ")");
}

Status CudaError(cudaError_t error, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  std::string what = CudaErrorMessage(error, call, file, line);
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(what);
  if (IsNoGpu(error)) return absl::FailedPreconditionError(what);
  return absl::InternalError(absl::StrCat(what, kGpuFailed));
}

Status CudnnError(cudnnStatus_t status, const char* call, const char* file, int line) {
  std::string what = CudnnErrorMessage(status, call, file, line);
  switch (status) {
    case CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED:
    case CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED:
      return absl::ResourceExhaustedError(absl::StrCat(what, kOutOfMemory));
    default:
      break;
  }
  switch (CUDNN_STATUS_CATEGORY(status)) {
    case 1000:  // CUDNN_STATUS_NOT_INITIALIZED, SUBLIBRARY_*...: the library could not start
      return absl::FailedPreconditionError(
          absl::StrCat(what,
                       ": cuDNN cannot run here; check that its libraries match the headers it was "
                       "built with (cudnnGetVersion) and nvidia-smi"));
    case CUDNN_STATUS_BAD_PARAM:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cuDNN refused a parameter (a size it cannot take?)"));
    case CUDNN_STATUS_NOT_SUPPORTED:
      return absl::UnimplementedError(
          absl::StrCat(what,
                       ": this cuDNN does not support that configuration on this GPU; try other "
                       "sizes, or --device cpu"));
    default:
      return absl::InternalError(absl::StrCat(what, kGpuFailed));
  }
}

Status CublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  std::string what = CublasErrorMessage(status, call, file, line);
  switch (status) {
    case CUBLAS_STATUS_ALLOC_FAILED:
      return absl::ResourceExhaustedError(absl::StrCat(what, kOutOfMemory));
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_LICENSE_ERROR:
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": cuBLAS cannot run here; check the CUDA install and nvidia-smi"));
    case CUBLAS_STATUS_INVALID_VALUE:
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": cuBLAS refused a parameter (a size it cannot take?)"));
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return absl::UnimplementedError(
          absl::StrCat(what, ": not supported on this GPU; try --device cpu"));
    default:
      return absl::InternalError(absl::StrCat(what, kGpuFailed));
  }
}

}  // namespace phub::worker::cudnn
