// A registered memory region: memory the HCA may read and (remote peers) write, pinned for its
// lifetime. PHub registers its slots and weight buffers once, at the handshake, never per
// message (registration pins pages and costs microseconds per page). Move-only; deregisters
// when it goes.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "phub/common/status.h"
#include "phub/transport/verbs/verbs_device.h"

namespace phub::transport::verbs {

class MemoryRegion {
 public:
  // `access`: IBV_ACCESS_* flags; LOCAL_WRITE is always added (receives need it).
  // ResourceExhausted with how to raise the memlock limit when it is too low.
  static StatusOr<MemoryRegion> Register(const VerbsDevice& device, std::span<std::byte> memory,
                                         int access);

  MemoryRegion() = default;
  MemoryRegion(MemoryRegion&& other) noexcept;
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  ~MemoryRegion();

  std::uint32_t lkey() const { return mr_->lkey; }
  std::uint32_t rkey() const { return mr_->rkey; }
  std::byte* data() const { return static_cast<std::byte*>(mr_->addr); }
  std::size_t size() const { return mr_->length; }
  // The address a peer writes to: the region's virtual address plus an offset.
  std::uint64_t remote_address(std::size_t offset = 0) const {
    return reinterpret_cast<std::uint64_t>(mr_->addr) + offset;
  }
  bool valid() const { return mr_ != nullptr; }

 private:
  explicit MemoryRegion(ibv_mr* mr) : mr_(mr) {}
  void Release();
  ibv_mr* mr_ = nullptr;
};

}  // namespace phub::transport::verbs
