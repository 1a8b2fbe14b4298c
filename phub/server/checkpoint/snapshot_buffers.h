// The buffers periodic checkpoints copy chunks into, kept for the job's life and reused: the
// cores take a chunk's buffers when they copy it (Shard::CopyForCheckpoint), the checkpoint
// carries them to the writer, and when the writer is done with the checkpoint they come back
// here. After the first checkpoint no checkpoint allocates, so phubd's memory stays flat at
// the weights plus one copy of them (and of the optimizer state) instead of rising and falling
// by that copy at every checkpoint, with the allocator keeping some of it and returning some.
// Thread-safe: core threads take, the writer thread gives back; one short lock per chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "phub/server/checkpoint/checkpoint_file.h"

namespace phub::server {

class SnapshotBuffers {
 public:
  explicit SnapshotBuffers(std::size_t chunks) : spare_(chunks) {}

  // Chunk `chunk`'s buffers from an earlier checkpoint (empty ones the first time); the caller
  // overwrites their contents (assign keeps the capacity).
  ChunkSnapshot Take(std::uint32_t chunk);
  // A checkpoint the writer is done with: its chunks' buffers become spare again.
  void GiveBack(std::vector<ChunkSnapshot>& chunks);

  // A JobSnapshot that gives its chunks back to `buffers` when the last holder lets it go (a
  // plain one where `buffers` is null).
  static std::shared_ptr<JobSnapshot> Recycling(std::shared_ptr<SnapshotBuffers> buffers,
                                                JobSnapshot&& header);

 private:
  std::mutex mu_;
  std::vector<ChunkSnapshot> spare_;  // by chunk id
};

}  // namespace phub::server
