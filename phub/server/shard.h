// Shard: one server core's world. It owns the chunks the key table placed on its core, and for
// each chunk: one receive slot per worker, the weights, the optimizer state, the arrival
// counter and the iteration. It owns its data connections too (one per worker). Everything
// runs on the core's single event-loop thread: no locks on the data path.
//
// A chunk's life at iteration t: every worker's PUSH(k, t) lands in slot[k][worker] (the
// connection reads straight into it); when the N-th copy is in, AggregateAndStep averages the
// slots and updates weights[k] and its state in one pass; WEIGHTS(k, t) then goes to every
// worker from weights[k] (no copy).
//
// Flow control: weights[k] is not modified while any send of it is still queued: a chunk whose
// N copies are in but whose previous broadcast is unfinished waits (pending_sends) before it
// aggregates. Per-worker duplicate and iteration checks keep a slot from being overwritten
// before it is summed.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phub/common/aligned_buffer.h"
#include "phub/server/job_spec.h"
#include "phub/transport/connection.h"

namespace phub::server {

// What a shard tells the control plane (posted to the control thread by the sink).
struct ShardEvent {
  enum class Kind {
    kWorkerLost,  // a worker's data connection closed without BYE: the job cannot complete
    kBadPeer,     // a connection that never attached was dropped (logged only)
    kLeftEarly,   // a worker said BYE, yet another pushed a chunk that needs its copy too
    kAllAttached,  // every worker of the job has attached to this core (sent once)

  };
  Kind kind;
  std::uint32_t core = 0;
  std::int64_t rank = -1;
  std::string reason;
};

struct ShardStats {
  std::uint64_t aggregations = 0;   // chunk-iterations completed
  std::uint64_t bytes_in = 0;       // payload bytes received (pushes + init)
  std::uint64_t bytes_out = 0;      // payload bytes sent (weights)
};

class Shard final : public transport::ConnectionHandler {
 public:
  using EventSink = std::function<void(ShardEvent)>;

  // Allocates slots, weights and state for the chunks of `core` (on the calling thread: create
  // the shard on its core's thread so first-touch puts the memory on the core's NUMA node).
  Shard(std::shared_ptr<const JobSpec> job, keys::CoreIndex core, EventSink sink);
  ~Shard() override;

  // Takes a freshly accepted data connection; it must ATTACH first.
  void Adopt(std::shared_ptr<transport::Connection> connection);
  // Closes every connection (job over or daemon stopping).
  void CloseAll(const Status& why);

  const ShardStats& stats() const { return stats_; }
  // Data connections adopted that have not attached yet.
  std::size_t unattached() const { return unattached_.size(); }

  // Every buffer a transport may have to register with its NIC (slots and weights): fixed for
  // the shard's life.
  std::vector<std::span<std::byte>> Buffers();

  // ConnectionHandler
  StatusOr<std::span<std::byte>> ResolveSlot(transport::Connection& connection,
                                             const transport::WireHeader& header) override;
  Status OnReceived(transport::Connection& connection,
                    const transport::WireHeader& header) override;
  void OnClosed(transport::Connection& connection, const Status& why) override;
  // For the worker whose ATTACH is `attach` (checked as Attach will: session, core, rank free):
  // its push of chunk k lands in slot[k][rank]; rank 0's INIT of a chunk without weights yet
  // lands in its weights. Nothing for a peer that has not said who it is.
  StatusOr<std::vector<transport::LandingZone>> LandingZones(
      const transport::Connection& connection, const transport::WireHeader* attach) override;

 private:
  struct ChunkState {
    const keys::Chunk* chunk = nullptr;
    AlignedBuffer slots;                  // world_size × elements, worker-major
    AlignedBuffer weights;                // elements
    std::vector<AlignedBuffer> state;     // optimizer state arrays
    std::vector<std::uint8_t> pushed;     // per worker: copy of this iteration in
    std::uint32_t arrived = 0;
    std::uint64_t iteration = 0;          // completed aggregations
    std::uint32_t pending_sends = 0;      // WEIGHTS of this chunk still queued
    bool initialized = false;             // weights hold real values
    bool announced = false;               // iteration-0 weights sent to everyone
  };

  StatusOr<ChunkState*> FindChunk(const transport::WireHeader& header);
  Status CheckAttach(const transport::WireHeader& header) const;
  Status Attach(transport::Connection& connection, const transport::WireHeader& header);
  void MaybeAggregate(ChunkState& state);
  // If `state` has pushes in but waits for a worker that said BYE, the iteration can never
  // complete: tell the control plane (once per shard) rather than let the others wait.
  void CheckCompletable(const ChunkState& state);
  void Broadcast(ChunkState& state);
  bool all_attached() const { return attached_ == job_->world_size; }

  std::shared_ptr<const JobSpec> job_;
  keys::CoreIndex core_;
  EventSink sink_;
  std::vector<ChunkState> chunks_;
  std::vector<std::int32_t> local_index_;  // chunk id -> index in chunks_, -1 if not ours
  std::vector<std::shared_ptr<transport::Connection>> unattached_;
  std::vector<std::shared_ptr<transport::Connection>> workers_;  // by rank
  std::vector<std::uint8_t> said_bye_;
  std::uint32_t attached_ = 0;
  bool closing_ = false;  // CloseAll in progress: closures are expected, not losses
  bool reported_left_early_ = false;
  std::vector<const float*> inputs_;  // scratch for AggregateAndStep
  std::vector<float*> state_ptrs_;
  ShardStats stats_;
};

}  // namespace phub::server
