// PHUB_WORKER_CHECK: the worker's assertion for programming invariants, the ones that only a bug
// in the calling code can break (calling an API in an order it documents as REQUIRES, a shape
// that an earlier check already guaranteed). It prints what was violated and where, and aborts;
// it is on in every build type. Anything a user, a file, a peer, a device or the allocator can
// cause is returned as a Status instead (phub/common/status.h), never checked here.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace phub::worker::detail {

[[noreturn]] inline void CheckFailed(const char* file, int line, const char* condition,
                                     std::string_view what) {
  std::fprintf(stderr, "%s:%d: invariant violated (a bug): %s: %.*s\n", file, line, condition,
               static_cast<int>(what.size()), what.data());
  std::fflush(stderr);
  std::abort();
}

}  // namespace phub::worker::detail

// `what` is anything convertible to std::string_view; it is only evaluated on failure.
#define PHUB_WORKER_CHECK(condition, what)                                         \
  do {                                                                             \
    if (!(condition)) [[unlikely]] {                                               \
      ::phub::worker::detail::CheckFailed(__FILE__, __LINE__, #condition, (what)); \
    }                                                                              \
  } while (0)
