// A registered memory region: memory the HCA may read and (remote peers) write, pinned for its
// lifetime. PHub registers its slots and weight buffers once, at the handshake, never per
// message (registration pins pages and costs microseconds per page). Move-only; deregisters
// when it goes.
//
// Two kinds: host memory (ibv_reg_mr) and device memory, a GPU's, that its driver exports as a
// dma-buf (ibv_reg_dmabuf_mr: GPUDirect RDMA, the NIC reads and writes the GPU itself). A
// region keeps its own span: for a dma-buf region rdma-core's mr->addr is the offset into the
// dma-buf, not an address of this process, so data(), size() and remote_address() never read
// the ibv_mr.
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

  // Device memory: the bytes of dma-buf `fd` from `offset`, which are `range` in this process's
  // address space (the region's iova is range.data(), so a peer writes to those addresses as to
  // host memory). `fd` stays the caller's. Unimplemented, naming the device, where its driver
  // has no dma-buf support (the caller stages through host memory instead); otherwise errors
  // as VerbsError, naming the device and the size.
  static StatusOr<MemoryRegion> RegisterDmaBuf(const VerbsDevice& device,
                                               std::span<std::byte> range, int fd,
                                               std::uint64_t offset, int access);

  MemoryRegion() = default;
  MemoryRegion(MemoryRegion&& other) noexcept;
  MemoryRegion& operator=(MemoryRegion&& other) noexcept;
  ~MemoryRegion();

  std::uint32_t lkey() const { return mr_->lkey; }
  std::uint32_t rkey() const { return mr_->rkey; }
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  // The address a peer writes to: the region's virtual address (its iova) plus an offset.
  std::uint64_t remote_address(std::size_t offset = 0) const {
    return reinterpret_cast<std::uint64_t>(data_) + offset;
  }
  // Device memory (RegisterDmaBuf): the CPU must never read or write it.
  bool device_memory() const { return device_memory_; }
  bool valid() const { return mr_ != nullptr; }

  // Tests of the device-memory guards on machines without a GPU: host memory treated as if it
  // were device memory.
  void TEST_MarkDeviceMemory() { device_memory_ = true; }

 private:
  MemoryRegion(ibv_mr* mr, std::span<std::byte> memory, bool device_memory)
      : mr_(mr), data_(memory.data()), size_(memory.size()), device_memory_(device_memory) {}
  void Release();
  ibv_mr* mr_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool device_memory_ = false;
};

}  // namespace phub::transport::verbs
