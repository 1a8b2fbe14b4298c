#include "phub/transport/verbs/memory_registry.h"

namespace phub::transport::verbs {

Status MemoryRegistry::Register(std::span<std::byte> memory) {
  if (Find(memory.data(), memory.size()) != nullptr) return absl::OkStatus();
  PHUB_ASSIGN_OR_RETURN(MemoryRegion region,
                        MemoryRegion::Register(*device_, memory, IBV_ACCESS_REMOTE_WRITE));
  Add(std::move(region));
  return absl::OkStatus();
}

Status MemoryRegistry::RegisterDevice(const DeviceMemory& memory) {
  if (Find(memory.range.data(), memory.range.size()) != nullptr) return absl::OkStatus();
  PHUB_ASSIGN_OR_RETURN(MemoryRegion region,
                        MemoryRegion::RegisterDmaBuf(*device_, memory.range, memory.dmabuf_fd,
                                                     memory.offset, IBV_ACCESS_REMOTE_WRITE));
  Add(std::move(region));
  return absl::OkStatus();
}

Status MemoryRegistry::TEST_RegisterAsDeviceMemory(std::span<std::byte> memory) {
  PHUB_ASSIGN_OR_RETURN(MemoryRegion region,
                        MemoryRegion::Register(*device_, memory, IBV_ACCESS_REMOTE_WRITE));
  region.TEST_MarkDeviceMemory();
  Add(std::move(region));
  return absl::OkStatus();
}

void MemoryRegistry::Add(MemoryRegion region) {
  registered_bytes_ += region.size();
  if (region.device_memory()) ++device_regions_;
  const std::byte* start = region.data();
  regions_.emplace(start, std::move(region));
}

void MemoryRegistry::Forget(std::span<std::byte> memory) {
  auto [first, last] = regions_.equal_range(memory.data());
  for (auto it = first; it != last; ++it) {
    if (it->second.size() == memory.size()) {
      registered_bytes_ -= memory.size();
      if (it->second.device_memory()) --device_regions_;
      regions_.erase(it);
      return;
    }
  }
}

const MemoryRegion* MemoryRegistry::Find(const std::byte* data, std::size_t bytes) const {
  // Regions starting at or before `data`, nearest first. Owners register disjoint buffers, so
  // the first one is almost always the answer; a miss just means "copy it".
  for (auto it = regions_.upper_bound(data); it != regions_.begin();) {
    --it;
    const MemoryRegion& region = it->second;
    if (data + bytes <= region.data() + region.size()) return &region;
  }
  return nullptr;
}

bool MemoryRegistry::InDeviceMemory(const std::byte* data, std::size_t bytes) const {
  if (device_regions_ == 0 || bytes == 0) return false;
  // Every region that starts before the range ends; one of device memory that ends after the
  // range starts overlaps it. Linear, but only an owner with device memory gets here, and an
  // owner registers a handful of buffers.
  const std::byte* end = data + bytes;
  for (auto it = regions_.begin(); it != regions_.end() && it->first < end; ++it) {
    const MemoryRegion& region = it->second;
    if (region.device_memory() && region.data() + region.size() > data) return true;
  }
  return false;
}

}  // namespace phub::transport::verbs
