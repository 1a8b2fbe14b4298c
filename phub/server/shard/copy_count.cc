#include "phub/server/shard/copy_count.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::server {
namespace {

// Element `from_end` counted from the end of `slot` (1: the last).
template <class T>
float FromEnd(std::span<const std::byte> slot, std::size_t from_end) {
  T value;
  std::memcpy(&value, slot.data() + slot.size() - from_end * sizeof(T), sizeof(T));  // not T[]
  return kernels::ToFloat(value);
}

float FromEnd(std::span<const std::byte> slot, kernels::WireFormat format, std::size_t from_end) {
  switch (format) {
    case kernels::WireFormat::kBf16:
      return FromEnd<kernels::Bf16>(slot, from_end);
    case kernels::WireFormat::kFp16:
      return FromEnd<kernels::Fp16>(slot, from_end);
    case kernels::WireFormat::kFp32:
      break;
  }
  return FromEnd<float>(slot, from_end);
}

// `value` as a whole number of 0 to `most`, else InvalidArgument naming `what` and `bound`.
StatusOr<std::uint32_t> Whole(float value, std::uint32_t most, const char* what,
                              const char* bound) {
  // The comparison first: NaN fails it, and the cast below is then of a value in range.
  if (!(value >= 0.0f && value <= static_cast<float>(most)) || std::trunc(value) != value) {
    return absl::InvalidArgumentError(absl::StrCat("its count of ", what, " is ", value,
                                                   ", not a whole number of 0 to ", most, " (",
                                                   bound, ")"));
  }
  return static_cast<std::uint32_t>(value);
}

}  // namespace

StatusOr<RackCount> ReadRackCount(std::span<const std::byte> slot, kernels::WireFormat format,
                                  std::uint32_t most) {
  if (slot.size() < kCountElements * kernels::WireBytes(format)) {
    return absl::InvalidArgumentError(absl::StrCat("a sum of fewer than ", kCountElements,
                                                   " elements has no counts"));
  }
  RackCount count;
  PHUB_ASSIGN_OR_RETURN(count.members, Whole(FromEnd(slot, format, 1), most, "members",
                                             "the sender's rack's workers"));
  PHUB_ASSIGN_OR_RETURN(count.copies, Whole(FromEnd(slot, format, 2), count.members, "copies",
                                            "its count of members"));
  return count;
}

}  // namespace phub::server
