#include "worker/backend/cudnn/checks.h"

#include <stdexcept>

#include "absl/strings/str_cat.h"
#include "phub/common/cuda_error_text.h"

namespace phub::worker::cudnn {

std::string CudaErrorMessage(cudaError_t error, const char* call, const char* file, int line) {
  std::string hint;
  switch (error) {
    case cudaErrorMemoryAllocation:
      hint = ": out of GPU memory (a smaller batch, or nvidia-smi shows who holds it)";
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
    case cudaErrorDevicesUnavailable:
    case cudaErrorInvalidDevice:
      hint = absl::StrCat(": no usable GPU; check nvidia-smi, the driver (it must support CUDA ",
                          CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10,
                          ") and CUDA_VISIBLE_DEVICES", kCudaUnderAsanHint);
      break;
    default:
      break;
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

void ThrowCudaError(cudaError_t error, const char* call, const char* file, int line) {
  (void)cudaGetLastError();
  throw std::runtime_error(CudaErrorMessage(error, call, file, line));
}

void ThrowCudnnError(cudnnStatus_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(CudnnErrorMessage(status, call, file, line));
}

void ThrowCublasError(cublasStatus_t status, const char* call, const char* file, int line) {
  throw std::runtime_error(CublasErrorMessage(status, call, file, line));
}

}  // namespace phub::worker::cudnn
