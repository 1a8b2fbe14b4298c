// ChunkState: everything a shard holds of one chunk it owns (Shard keeps one per chunk of its
// core, allocated when the shard is made and fixed in size for its life). Touched on the
// shard's thread only; its buffers are registered with the transport (Shard::Buffers), so none
// is ever reallocated.
#pragma once

#include <cstdint>
#include <vector>

#include "phub/common/aligned_buffer.h"
#include "phub/keys/key_table.h"

namespace phub::server {

// Per worker, while it resumes (shard_recovery.cc): nothing owed, its replayed push of this
// chunk is still to come (kExpected), or that and the chunk's next broadcast waits for it too
// (kHeld: the chunk holds its copy already, so the broadcast could otherwise reach the worker
// before it asked).
enum class ReplayState : std::uint8_t { kNone, kExpected, kHeld };

// JobSpec::wire.weights (docs/design.md "The compact wire"): the weights go back to workers as
// rounded changes in the job's wire format, so the shard keeps what every worker holds of the
// chunk. Empty buffers without wire_weights.
struct CompactView {
  // What every worker holds, float32: of the chunk's iteration (current) and, with
  // JobSpec::keep_previous, of the one before (previous). A worker's first weights are the
  // whole view, as INIT.
  AlignedBuffer current, previous;
  // The rounded change that took the view to iteration change_of: what workers are sent.
  AlignedBuffer change;
  std::uint64_t change_of = UINT64_MAX;
  // The view holds the weights: set on first use (INIT may come late), cleared when weights
  // are loaded from a checkpoint (Shard::EnsureView).
  bool ready = false;
};

struct ChunkState {
  const keys::Chunk* chunk = nullptr;  // in the job's key table
  AlignedBuffer slots;                 // world_size × elements in the wire format, worker-major
  AlignedBuffer weights;               // elements, float32
  std::vector<AlignedBuffer> state;    // the optimizer's state arrays
  AlignedBuffer previous;              // keep_previous: the weights of iteration - 1

  // The iteration in progress (iteration + 1): the copies in, by worker and counted.
  std::vector<std::uint8_t> pushed;    // per worker: its copy is in; cleared as the chunk steps
  std::uint32_t arrived = 0;
  // JobSpec::most_copies (a home's chunk): per worker, the counts its copy in carries (of
  // copies, and of its rack's members that iteration: copy_count.h), read and checked as it
  // arrived (never read again from the slot, which a verbs peer can rewrite).
  std::vector<std::uint32_t> copies, members;
  std::vector<ReplayState> replay;     // per worker (shard_recovery.cc)

  std::uint64_t iteration = 0;         // completed aggregations
  // WEIGHTS of this chunk still queued (or its turn in the fair queue, or, with JobSpec::relay,
  // its weights still coming back): weights, previous and view are not rewritten meanwhile, so
  // the chunk does not aggregate.
  std::uint32_t pending_sends = 0;
  bool initialized = false;            // weights hold real values
  bool announced = false;              // iteration-0 weights sent to everyone
  bool relay_ready = false;            // JobSpec::relay: the relay holds the initial weights

  CompactView view;                    // JobSpec::wire.weights
};

}  // namespace phub::server
