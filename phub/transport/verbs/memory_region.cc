#include "phub/transport/verbs/memory_region.h"

#include <cerrno>
#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/transport/verbs/verbs_error.h"

namespace phub::transport::verbs {
namespace {

Status NothingToRegister(const VerbsDevice& device) {
  return absl::InvalidArgumentError(
      absl::StrCat("cannot register 0 bytes on ", device.name(), ": give a non-empty buffer"));
}

}  // namespace

StatusOr<MemoryRegion> MemoryRegion::Register(const VerbsDevice& device,
                                              std::span<std::byte> memory, int access) {
  if (memory.empty()) return NothingToRegister(device);
  ibv_mr* mr = ibv_reg_mr(device.pd(), memory.data(), memory.size(),
                          access | IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) return RegisterMemoryError(device.name(), memory.size(), errno);
  return MemoryRegion(mr, {static_cast<std::byte*>(mr->addr), mr->length},
                      /*device_memory=*/false);
}

StatusOr<MemoryRegion> MemoryRegion::RegisterDmaBuf(const VerbsDevice& device,
                                                    std::span<std::byte> range, int fd,
                                                    std::uint64_t offset, int access) {
  if (range.empty()) return NothingToRegister(device);
  if (fd < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot register device memory on ", device.name(),
                     " without its dma-buf: the file descriptor is ", fd));
  }
  ibv_mr* mr = ibv_reg_dmabuf_mr(device.pd(), offset, range.size(),
                                 /*iova=*/reinterpret_cast<std::uint64_t>(range.data()), fd,
                                 access | IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) return RegisterDmaBufError(device.name(), range.size(), errno);
  return MemoryRegion(mr, range, /*device_memory=*/true);
}

MemoryRegion::MemoryRegion(MemoryRegion&& other) noexcept
    : mr_(std::exchange(other.mr_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      device_memory_(std::exchange(other.device_memory_, false)) {}

MemoryRegion& MemoryRegion::operator=(MemoryRegion&& other) noexcept {
  if (this != &other) {
    Release();
    mr_ = std::exchange(other.mr_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_memory_ = std::exchange(other.device_memory_, false);
  }
  return *this;
}

MemoryRegion::~MemoryRegion() { Release(); }

void MemoryRegion::Release() {
  if (mr_ != nullptr) ibv_dereg_mr(mr_);
  mr_ = nullptr;
  data_ = nullptr;
  size_ = 0;
  device_memory_ = false;
}

}  // namespace phub::transport::verbs
