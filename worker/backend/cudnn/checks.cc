#include "worker/backend/cudnn/checks.h"

#include <cstring>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace phub::worker::cudnn {
namespace {

#if defined(__SANITIZE_ADDRESS__)
// The CUDA driver cannot initialise while ASan protects its shadow gap.
constexpr const char* kSanitizerHint =
    " [built with AddressSanitizer: CUDA needs ASAN_OPTIONS=protect_shadow_gap=0]";
#else
constexpr const char* kSanitizerHint = "";
#endif

// "worker/backend/cudnn/x.cc" rather than the build machine's absolute path.
const char* ShortPath(const char* file) {
  const char* at = std::strstr(file, "worker/");
  return at != nullptr ? at : file;
}

}  // namespace

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
                          ") and CUDA_VISIBLE_DEVICES", kSanitizerHint);
      break;
    default:
      break;
  }
  return absl::StrCat(call, " failed at ", ShortPath(file), ":", line, ": ",
                      cudaGetErrorName(error), " (", cudaGetErrorString(error), ")", hint);
}

std::string CudnnErrorMessage(cudnnStatus_t status, const char* call, const char* file, int line) {
  std::string what = absl::StrCat(call, " failed at ", ShortPath(file), ":", line, ": ",
                                  cudnnGetErrorString(status));
  // cuDNN 9 keeps a thread-local detailed message for the last failure (which argument, why).
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  if (detail[0] != '\0') absl::StrAppend(&what, " (", detail, ")");
  return what;
}

std::string CublasErrorMessage(cublasStatus_t status, const char* call, const char* file,
                               int line) {
  return absl::StrCat(call, " failed at ", ShortPath(file), ":", line, ": ",
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
