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
//
// Recovery (shard_recovery.cc, docs/design.md "Recovery"): with JobSpec::keep_previous each
// chunk also keeps the weights of its previous iteration, so that a worker that died and comes
// back (ForgetWorker, then ExpectRejoin) can be given every chunk's weights of one iteration and
// replay the iteration in flight; its replayed pushes of chunks that already counted its copy
// are taken and dropped. Chunks are copied for checkpoints as they pass a multiple of
// JobSpec::checkpoint_every (kSnapshot), or all at once by SnapshotNow.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "phub/common/aligned_buffer.h"
#include "phub/server/checkpoint/checkpoint_file.h"
#include "phub/server/shard/chunk_relay.h"
#include "phub/server/shard/fair_send_queue.h"
#include "phub/server/shard/job_spec.h"
#include "phub/server/shard/server_metrics.h"
#include "phub/server/shard/wire_slots.h"
#include "phub/transport/connection.h"
#include "phub/transport/send_scheduler.h"

namespace phub::server {

// What a shard tells the control plane (posted to the control thread by the sink).
struct ShardEvent {
  enum class Kind {
    kWorkerLost,  // a worker's data connection closed without BYE: the job cannot complete
    kBadPeer,     // a connection that never attached was dropped (logged only)
    kLeftEarly,   // a worker said BYE, yet another pushed a chunk that needs its copy too
    kAllAttached,  // every worker of the job has attached to this core (again, after a rejoin)
    kSnapshot,     // every chunk of this core has been copied for the checkpoint of `iteration`
  };
  Kind kind;
  std::uint32_t core = 0;
  std::int64_t rank = -1;
  std::string reason{};
  // kWorkerLost: how many times the rank had been forgotten (ForgetWorker) on this core when
  // its connection closed, so that the loss of a connection of an earlier life, reported late,
  // is told apart from the rejoined worker's.
  std::uint64_t epoch = 0;
  // kSnapshot: the chunks, and how long copying them held up this core in all.
  std::uint64_t iteration = 0;
  std::shared_ptr<std::vector<ChunkSnapshot>> chunks{};
  double pause_ms = 0;
};

// Where a worker that is gone stands on one core (Shard::ForgetWorker).
struct RejoinPoint {
  // Over this core's chunks, the fewest iterations that hold the worker's copy (a chunk's
  // completed iterations, plus one if its copy of the next is in): the rejoiner resumes at the
  // minimum over all cores. UINT64_MAX for a core with no chunks.
  std::uint64_t contributed = UINT64_MAX;
  std::uint64_t uninitialized = 0;  // chunks still without initial weights
};

struct ShardStats {
  std::uint64_t aggregations = 0;   // chunk-iterations completed
  std::uint64_t bytes_in = 0;       // payload bytes received (pushes + init)
  std::uint64_t bytes_out = 0;      // payload bytes sent (weights)
  // CPU time of the core's thread while the shard lived (user + system: the aggregation, the
  // bookkeeping and the transport's syscalls and copies); set by ServerCore::RemoveShard.
  double cpu_seconds = 0;
};

class Shard final : public transport::ConnectionHandler {
 public:
  using EventSink = std::function<void(ShardEvent)>;

  // Allocates slots, weights and state for the chunks of `core` (on the calling thread: create
  // the shard on its core's thread so first-touch puts the memory on the core's NUMA node).
  // `metrics`: the core's exported series (server_metrics.h), or null (tests, fuzzers).
  // `fair`: the core's queue its broadcasts take turns in with other jobs' (fair_send_queue.h;
  // the shard's flow is its job's session, added by the caller); null: sent at once.
  Shard(std::shared_ptr<const JobSpec> job, keys::CoreIndex core, EventSink sink,
        const CoreMetrics* metrics = nullptr, FairSendQueue* fair = nullptr);
  ~Shard() override;

  // Takes a freshly accepted data connection; it must ATTACH first.
  void Adopt(std::shared_ptr<transport::Connection> connection);
  // Takes a started connection whose ATTACH (`attach`, accepted by ResolveSlot) names this
  // shard's job (ShardRouter).
  Status AdoptAttached(std::shared_ptr<transport::Connection> connection,
                       const transport::WireHeader& attach);
  // Closes every connection (job over or daemon stopping).
  void CloseAll(const Status& why);

  const ShardStats& stats() const { return stats_; }
  std::uint64_t session() const { return job_->session; }
  // Data connections adopted that have not attached yet.
  std::size_t unattached() const { return unattached_.size(); }

  // Every buffer a transport may have to register with its NIC (slots and weights): fixed for
  // the shard's life.
  std::vector<std::span<std::byte>> Buffers();

  // Recovery (shard_recovery.cc). ForgetWorker: `rank` is gone (its control connection was
  // lost): its data connection, if still open, is closed without reporting it, its place is
  // freed for a rejoin, and where it stands is returned. ExpectRejoin: `rank` comes back at
  // `iteration` (the minimum of every core's RejoinPoint): once it attaches it gets each chunk's
  // weights of that iteration (now, or when the chunk completes it), and its pushes of
  // iteration + 1 that are already counted are dropped.
  RejoinPoint ForgetWorker(std::uint32_t rank);
  void ExpectRejoin(std::uint32_t rank, std::uint64_t iteration);
  // Every chunk as it is now, previous weights included (a checkpoint on SIGTERM).
  std::vector<ChunkSnapshot> SnapshotNow() const;

  // Racks of racks (JobSpec::relay, chunk_relay.h). OnRelayReady: the relay holds every
  // chunk's initial weights: they go to the workers (once all attached). OnRelayed: chunk
  // `chunk`'s weights of its next iteration are in (the answer to Forward): they go out too.
  void OnRelayReady();
  void OnRelayed(std::uint32_t chunk);

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
    // JobSpec::relay: the relay holds the initial weights. While the rack's sum is passed on
    // (Forward) the chunk waits for its weights as for a send (pending_sends).
    bool relay_ready = false;
    AlignedBuffer previous;               // keep_previous: weights of iteration - 1
    // JobSpec::wire_weights (docs/design.md "The compact wire"): what every worker holds of
    // this chunk, float32 (view; keep_previous: view_previous, of iteration - 1), and the
    // rounded change that took the view to iteration change_of, which is what workers are sent.
    // A worker's first weights (of start_at_) are the whole view, float32, as INIT.
    AlignedBuffer view, view_previous, change;
    std::uint64_t change_of = UINT64_MAX;
    bool view_ready = false;  // view holds the weights (set on first use: INIT may come late)
    // Per worker, while it resumes: kNone, or its replayed push of this chunk is still to come
    // (kExpected), and the chunk's next broadcast waits for it too (kHeld: the chunk holds
    // its copy already, so the broadcast could otherwise reach it before it asked).
    std::vector<std::uint8_t> replay;
  };
  enum ReplayState : std::uint8_t { kNone = 0, kExpected = 1, kHeld = 2 };
  // What ResolveSlot decided about a push, for OnReceived (between them other connections'
  // messages may complete the chunk, so the decision is kept, not taken again).
  enum class PushKind : std::uint8_t { kCount, kReplayDone, kReplayCounted };

  StatusOr<ChunkState*> FindChunk(const transport::WireHeader& header);
  Status CheckAttach(const transport::WireHeader& header) const;
  Status Attach(transport::Connection& connection, const transport::WireHeader& header);
  void MaybeAggregate(ChunkState& state);
  // Whether the chunk's first weights can go out: it has them, every worker is attached, and
  // (JobSpec::relay) the other racks start from them too.
  bool Announceable(const ChunkState& state) const;
  // If `state` has pushes in but waits for a worker that said BYE, the iteration can never
  // complete: tell the control plane (once per shard) rather than let the others wait.
  void CheckCompletable(const ChunkState& state);
  // Sends every worker the chunk's new weights: at once, or in its turn on the core (fair_).
  void Broadcast(ChunkState& state);
  void SendToAll(ChunkState& state, std::function<void()> sent);
  // Sends `rank` alone chunk `state`'s weights of `iteration` from `source` (weights or
  // previous); `sent` (if any) runs when the send completes. False if nothing was sent.
  bool SendTo(std::uint32_t rank, ChunkState& state, const AlignedBuffer& source,
              std::uint64_t iteration, std::function<void()> sent = nullptr);
  // wire_weights: the view set from the weights, once (after INIT or a checkpoint's load).
  void EnsureView(ChunkState& state);
  // wire_weights, after an aggregation: the view's rounded change to the new weights.
  void UpdateView(ChunkState& state, bool swapped);
  // Recovery (shard_recovery.cc).
  void LoadSnapshot(ChunkState& state, const ChunkSnapshot& snapshot);
  void SendResumeWeights(std::uint32_t rank);
  std::optional<PushKind> ReplayOf(std::uint32_t rank, const transport::WireHeader& header,
                                   const ChunkState& state) const;
  void CopyForCheckpoint(ChunkState& state);
  bool all_attached() const { return attached_ == job_->world_size; }
  // What the shard counts, in stats_ (the job-end log line) and the exported series.
  void CountReceived(std::uint64_t bytes, bool push);
  void CountSent(std::uint64_t bytes);
  void CountAggregation(std::chrono::steady_clock::time_point began);

  std::shared_ptr<const JobSpec> job_;
  keys::CoreIndex core_;
  EventSink sink_;
  std::vector<ChunkState> chunks_;
  std::vector<std::int32_t> local_index_;  // chunk id -> index in chunks_, -1 if not ours
  std::vector<std::shared_ptr<transport::Connection>> unattached_;
  std::vector<std::shared_ptr<transport::Connection>> workers_;  // by rank
  // By rank, beside workers_ (set and cleared with it): orders the WEIGHTS each worker gets,
  // first layers first (JobSpec::send_window_bytes).
  std::vector<std::shared_ptr<transport::SendScheduler>> senders_;
  std::vector<std::uint8_t> said_bye_;
  std::uint32_t attached_ = 0;
  bool closing_ = false;  // CloseAll in progress: closures are expected, not losses
  bool reported_left_early_ = false;
  // Recovery, by rank: the iteration a rejoining worker resumes at once it attaches
  // (kNoResume: none), and the last iteration whose pushes may be replays.
  static constexpr std::uint64_t kNoResume = UINT64_MAX;
  std::vector<std::uint64_t> resume_at_;
  std::vector<std::uint64_t> replay_through_;
  // The iteration of each worker's first weights (0, or where it resumed): with wire_weights
  // they go whole (INIT), and every later one as a change of them.
  std::vector<std::uint64_t> start_at_;
  std::vector<std::uint8_t> seen_;          // attached once in this job
  std::vector<std::uint64_t> forgotten_;    // ForgetWorker calls, by rank (ShardEvent::epoch)
  std::vector<PushKind> push_kind_;         // ResolveSlot's decision for OnReceived
  // The checkpoint being collected: its iteration (0: none) and the chunks copied so far.
  std::uint64_t snapshot_iteration_ = 0;
  std::size_t snapshot_filled_ = 0;
  double snapshot_pause_ms_ = 0;
  std::shared_ptr<std::vector<ChunkSnapshot>> snapshot_;
  std::vector<const void*> inputs_;  // scratch for AggregateSlots
  std::vector<float*> state_ptrs_;
  ShardStats stats_;
  const CoreMetrics* metrics_;
  FairSendQueue* fair_;
  // phub_core_round_seconds: aggregations since the round began, and when it began (the
  // previous round's end, or the shard's first push).
  std::size_t round_aggregations_ = 0;
  std::optional<std::chrono::steady_clock::time_point> round_began_;
};

}  // namespace phub::server
