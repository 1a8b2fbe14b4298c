// The memory of one owner (a shard's slots and weights, a client's weight buffers) registered
// with the device once, up front, and looked up by address afterwards: a landing zone must lie
// in a registered region (its rkey goes to the peer), and a payload that does is sent without
// a copy. There is deliberately no "register on first use" cache: memory the owner may free
// and reuse while registered would leave a region pinning stale pages. The registry lives as
// long as the owner's memory does (a shard's registry goes with its job).
//
// Device memory (a GPU's, GPUDirect RDMA) is registered here too and found like host memory;
// the connections ask InDeviceMemory before any copy, because the CPU must never touch it.
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <span>

#include "phub/transport/transport.h"
#include "phub/transport/verbs/memory_region.h"

namespace phub::transport::verbs {

class MemoryRegistry {
 public:
  explicit MemoryRegistry(std::shared_ptr<const VerbsDevice> device) : device_(std::move(device)) {}

  // Registers `memory` for local reads and remote writes. A range already inside a registered
  // region is not registered again.
  Status Register(std::span<std::byte> memory);

  // Registers device memory (its dma-buf) for local reads and remote writes, as Register;
  // MemoryRegion::RegisterDmaBuf's errors (Unimplemented where the device cannot).
  Status RegisterDevice(const DeviceMemory& memory);

  // Deregisters the region registered for exactly `memory` (nothing if there is none), host
  // or device memory.
  void Forget(std::span<std::byte> memory);

  // The region wholly containing [data, data + bytes), or null.
  const MemoryRegion* Find(const std::byte* data, std::size_t bytes) const;

  // Whether any of [data, data + bytes) is device memory (false for 0 bytes).
  bool InDeviceMemory(const std::byte* data, std::size_t bytes) const;

  std::size_t regions() const { return regions_.size(); }
  std::size_t registered_bytes() const { return registered_bytes_; }
  const VerbsDevice& device() const { return *device_; }

  // Registers host memory as Register does, but marked as device memory: the guards against
  // copying device memory, tested where no GPU is.
  Status TEST_RegisterAsDeviceMemory(std::span<std::byte> memory);

 private:
  void Add(MemoryRegion region);

  std::shared_ptr<const VerbsDevice> device_;
  std::multimap<const std::byte*, MemoryRegion> regions_;  // by start address
  std::size_t registered_bytes_ = 0;
  std::size_t device_regions_ = 0;  // so that InDeviceMemory costs nothing without any
};

}  // namespace phub::transport::verbs
