#include "phub/server/shard/copy_count.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::server {
namespace {

template <class T>
float LastOf(std::span<const std::byte> slot) {
  T last;
  std::memcpy(&last, slot.data() + slot.size() - sizeof(T), sizeof(T));  // slots are not T[]
  return kernels::ToFloat(last);
}

}  // namespace

StatusOr<std::uint32_t> ReadCopyCount(std::span<const std::byte> slot, kernels::WireFormat format,
                                      std::uint32_t most) {
  if (slot.size() < kernels::WireBytes(format)) {
    return absl::InvalidArgumentError("a sum of no elements has no count of copies");
  }
  float count = 0;
  switch (format) {
    case kernels::WireFormat::kFp32:
      count = LastOf<float>(slot);
      break;
    case kernels::WireFormat::kBf16:
      count = LastOf<kernels::Bf16>(slot);
      break;
    case kernels::WireFormat::kFp16:
      count = LastOf<kernels::Fp16>(slot);
      break;
  }
  // The comparison first: NaN fails it, and the cast below is then of a value in range.
  if (!(count >= 0.0f && count <= static_cast<float>(most)) || std::trunc(count) != count) {
    return absl::InvalidArgumentError(absl::StrCat("its count of copies is ", count,
                                                   ", not a whole number of 0 to ", most,
                                                   " (the sender's rack's workers)"));
  }
  return static_cast<std::uint32_t>(count);
}

}  // namespace phub::server
