// Expected failures are returned, never thrown: absl::Status / absl::StatusOr<T>.
// Codes follow abseil's meaning: InvalidArgument (bad input: fix it), Unavailable (peer gone),
// FailedPrecondition (wrong state), DeadlineExceeded, Internal (a bug).
// Messages say what went wrong, where, and what to do about it.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "fmt/format.h"

namespace phub {

using Status = absl::Status;
template <typename T>
using StatusOr = absl::StatusOr<T>;

}  // namespace phub

// Debian's abseil has its own string_view type (not std::string_view); teach fmt (and so
// spdlog) to print it, so `spdlog::warn("{}", status.message())` works.
#if !defined(ABSL_USES_STD_STRING_VIEW)
template <>
struct fmt::formatter<absl::string_view> : fmt::formatter<fmt::string_view> {
  template <typename Context>
  auto format(absl::string_view s, Context& ctx) const {
    return fmt::formatter<fmt::string_view>::format(fmt::string_view(s.data(), s.size()), ctx);
  }
};
#endif

// Returns from the enclosing function if `expr` (a Status) is not ok.
#define PHUB_RETURN_IF_ERROR(expr)              \
  do {                                          \
    ::phub::Status phub_status_ = (expr);       \
    if (!phub_status_.ok()) return phub_status_; \
  } while (0)

#define PHUB_CONCAT_INNER_(a, b) a##b
#define PHUB_CONCAT_(a, b) PHUB_CONCAT_INNER_(a, b)
// Declares `lhs` from a StatusOr expression, returning its error if it has one.
#define PHUB_ASSIGN_OR_RETURN(lhs, expr)                                    \
  auto PHUB_CONCAT_(phub_or_, __LINE__) = (expr);                           \
  if (!PHUB_CONCAT_(phub_or_, __LINE__).ok())                               \
    return PHUB_CONCAT_(phub_or_, __LINE__).status();                       \
  lhs = std::move(*PHUB_CONCAT_(phub_or_, __LINE__))
