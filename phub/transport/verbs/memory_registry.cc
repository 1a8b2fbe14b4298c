#include "phub/transport/verbs/memory_registry.h"

namespace phub::transport::verbs {

Status MemoryRegistry::Register(std::span<std::byte> memory) {
  if (Find(memory.data(), memory.size()) != nullptr) return absl::OkStatus();
  PHUB_ASSIGN_OR_RETURN(MemoryRegion region,
                        MemoryRegion::Register(*device_, memory, IBV_ACCESS_REMOTE_WRITE));
  registered_bytes_ += memory.size();
  regions_.emplace(memory.data(), std::move(region));
  return absl::OkStatus();
}

void MemoryRegistry::Forget(std::span<std::byte> memory) {
  auto [first, last] = regions_.equal_range(memory.data());
  for (auto it = first; it != last; ++it) {
    if (it->second.size() == memory.size()) {
      registered_bytes_ -= memory.size();
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

}  // namespace phub::transport::verbs
