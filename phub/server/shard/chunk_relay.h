// Racks of racks (docs/design.md "Racks of racks"): where a rack's PBox sends a chunk once its
// rack's copies are summed, and where the chunk's weights come back from. A job whose workers
// span several racks runs on each rack's phubd as a job of that rack's workers whose shards
// (shard.h) sum the copies without stepping, and hand the sum to the job's ChunkRelay
// (uplink.h), which passes it to the chunk's home PBox and, once the home has stepped, tells the
// shard (Shard::OnRelayed), which copies the new weights in and sends them to the rack's
// workers. One copy of the weights a chunk and iteration on the rack's PBox buys buffers whose
// life is the relay's: its links may still be closing when the job's shards are freed.
#pragma once

#include <cstdint>
#include <span>

#include "phub/keys/key_table.h"
#include "phub/server/shard/copy_count.h"

namespace phub::server {

// Threading: each call for a chunk comes from the core that owns it.
class ChunkRelay {
 public:
  virtual ~ChunkRelay() = default;
  // The relay's own buffers of chunk `chunk` (an id of the job's key table), fixed for its
  // life, so that what is in flight never depends on the shard's: the shard writes the rack's
  // sum to Partial before Forward and reads the weights from Landed when told (Shard::OnRelayed,
  // Shard::OnRelayReady); the relay touches neither in between.
  virtual std::span<float> Partial(std::uint32_t chunk) = 0;
  virtual std::span<const float> Landed(std::uint32_t chunk) = 0;
  // Chunk `chunk`'s rack sum of its next iteration is in Partial(chunk), and holds
  // `count.copies` workers' copies (the members of the iteration whose copies are in; 0: nobody
  // of the rack pushed it, and Partial holds zeros) of the `count.members` its schedule gives
  // the iteration. The home divides by the copies of every rack and scales the lr by the
  // members of every rack (copy_count.h).
  virtual void Forward(keys::CoreIndex core, std::uint32_t chunk, RackCount count) = 0;
  // Rank 0's initial weights of `chunk` (the rack whose rank 0 starts the job): copied.
  virtual void Initialized(keys::CoreIndex core, std::uint32_t chunk,
                           std::span<const float> weights) = 0;
};

}  // namespace phub::server
