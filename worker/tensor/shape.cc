#include "worker/tensor/shape.h"

#include "absl/strings/str_join.h"

namespace phub::worker {

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : dims_) n *= d;
  return n;
}

std::string Shape::ToString() const { return "[" + absl::StrJoin(dims_, ", ") + "]"; }

}  // namespace phub::worker
