#include "phub/server/checkpoint/snapshot_buffers.h"

#include <utility>

namespace phub::server {

ChunkSnapshot SnapshotBuffers::Take(std::uint32_t chunk) {
  std::lock_guard<std::mutex> lock(mu_);
  if (chunk >= spare_.size()) return ChunkSnapshot{};
  return std::exchange(spare_[chunk], ChunkSnapshot{});
}

void SnapshotBuffers::GiveBack(std::vector<ChunkSnapshot>& chunks) {
  std::lock_guard<std::mutex> lock(mu_);
  for (ChunkSnapshot& chunk : chunks) {
    if (chunk.chunk < spare_.size() && chunk.weights.capacity() > 0) {
      spare_[chunk.chunk] = std::move(chunk);
    }
  }
}

std::shared_ptr<JobSnapshot> SnapshotBuffers::Recycling(std::shared_ptr<SnapshotBuffers> buffers,
                                                        JobSnapshot&& header) {
  if (!buffers) return std::make_shared<JobSnapshot>(std::move(header));
  return std::shared_ptr<JobSnapshot>(new JobSnapshot(std::move(header)),
                                      [buffers = std::move(buffers)](JobSnapshot* snapshot) {
                                        buffers->GiveBack(snapshot->chunks);
                                        delete snapshot;
                                      });
}

}  // namespace phub::server
