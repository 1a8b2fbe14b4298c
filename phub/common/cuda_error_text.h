// Pieces of the CUDA error messages that phub/nccl and worker/backend/cudnn both write (each
// maps its own library's errors; these two parts are the same for both).
#pragma once

#include <cstring>

namespace phub {

// Appended to "no usable GPU" errors: the CUDA driver cannot initialise while ASan protects its
// shadow gap, which reads like a missing GPU.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr const char* kCudaUnderAsanHint =
    " [built with AddressSanitizer: CUDA needs ASAN_OPTIONS=protect_shadow_gap=0]";
#else
inline constexpr const char* kCudaUnderAsanHint = "";
#endif

// "phub/nccl/x.cc" or "worker/backend/cudnn/x.cc" rather than the build machine's absolute
// __FILE__: from the last path component that is one of the two source roots on (the last, so a
// checkout that is itself called "phub" still gives "worker/...").
inline const char* RepoRelativePath(const char* file) {
  const char* found = file;
  for (const char* p = file; *p != '\0'; ++p) {
    if ((p == file || p[-1] == '/') &&
        (std::strncmp(p, "phub/", 5) == 0 || std::strncmp(p, "worker/", 7) == 0)) {
      found = p;
    }
  }
  return found;
}

}  // namespace phub
