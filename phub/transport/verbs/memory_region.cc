#include "phub/transport/verbs/memory_region.h"

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/transport/verbs/verbs_error.h"

namespace phub::transport::verbs {

StatusOr<MemoryRegion> MemoryRegion::Register(const VerbsDevice& device,
                                              std::span<std::byte> memory, int access) {
  if (memory.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot register 0 bytes on ", device.name(), ": give a non-empty buffer"));
  }
  ibv_mr* mr = ibv_reg_mr(device.pd(), memory.data(), memory.size(),
                          access | IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) return RegisterMemoryError(device.name(), memory.size(), errno);
  return MemoryRegion(mr);
}

MemoryRegion::MemoryRegion(MemoryRegion&& other) noexcept
    : mr_(std::exchange(other.mr_, nullptr)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    Release();
    mr_ = std::exchange(other.mr_, nullptr);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() { Release(); }

void MemoryRegion::Release() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  mr_ = nullptr;
}

}  // namespace phub::transport::verbs
