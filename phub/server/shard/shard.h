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
//
// Its state: one ChunkState per chunk (chunk_state.h), one ShardMember per rank (member.h).
// Its code, by job: shard.cc (making it, adopting and attaching connections, their closing),
// shard_push.cc (what workers send: checks, counting, aggregation, the relay's answers),
// shard_send.cc (weights out: broadcast, fair turns, one worker's send), shard_view.cc (the
// compact wire's view), shard_recovery.cc (rejoins, checkpoints), shard_counters.cc (stats and
// the core's series).
#pragma once

#include <cassert>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "phub/common/aligned_buffer.h"
#include "phub/common/member_schedule.h"
#include "phub/server/checkpoint/checkpoint_file.h"
#include "phub/server/shard/chunk_relay.h"
#include "phub/server/shard/chunk_state.h"
#include "phub/server/shard/shared_send_queue.h"
#include "phub/server/shard/job_spec.h"
#include "phub/server/shard/member.h"
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
    // JobSpec::per_iteration_values: a chunk has every copy of `iteration` in, and waits for
    // the iteration's hyper-parameters (once per iteration and core).
    kAwaitingValues,
  };
  Kind kind;
  std::uint32_t core = 0;
  std::int64_t rank = -1;
  std::string reason{};
  // kWorkerLost: how many times the rank had been forgotten (ForgetWorker) on this core when
  // its connection closed, so that the loss of a connection of an earlier life, reported late,
  // is told apart from the rejoined worker's.
  std::uint64_t epoch = 0;
  // kSnapshot: the chunks, and how long copying them held up this core in all; the batches the
  // job took before the iteration after `iteration` (JobSnapshot::batches_before), if known.
  std::uint64_t iteration = 0;
  std::optional<std::uint64_t> batches_before{};
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
  // The shard is bound to the calling thread: every later call, its destruction included, must
  // come from it (asserted).
  // `metrics`: the core's exported series (server_metrics.h), or null (tests, fuzzers).
  // `fair`: the core's queue its broadcasts take turns in with other jobs' (shared_send_queue.h;
  // the shard's flow is its job's session, added by the caller); null: sent at once.
  Shard(std::shared_ptr<const JobSpec> job, keys::CoreIndex core, EventSink sink,
        const CoreMetrics* metrics = nullptr, SharedSendQueue* fair = nullptr);
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
  // Every chunk as it is now, previous weights included (a checkpoint on SIGTERM; the state a
  // worker asks for). A chunk's iteration counts the optimizer's steps (RestoreState's too).
  std::vector<ChunkSnapshot> SnapshotNow() const;
  // The job starts its optimizer from a user's state (docs/protocol.md "The optimizer's
  // state"): `steps` steps taken (Adam's bias correction goes on from there; checkpoints count
  // from there) and, for each of this core's chunks, chunks[id].state (StateArrays arrays of
  // its elements; checked by the caller). FailedPrecondition, nothing changed, unless every
  // chunk has its initial weights and no push yet.
  Status RestoreState(std::uint64_t steps, const std::vector<ChunkSnapshot>& chunks);

  // Racks of racks (JobSpec::relay, chunk_relay.h). OnRelayReady: the relay holds every
  // chunk's initial weights: they go to the workers (once all attached). OnRelayed: chunk
  // `chunk`'s weights of its next iteration are in (the answer to Forward): they go out too.
  void OnRelayReady();
  void OnRelayed(std::uint32_t chunk);

  // JobSpec::per_iteration_values: iteration `iteration` steps with `values` (every rank's,
  // agreed on the control plane); its chunks that wait for them step now.
  void StepWith(std::uint64_t iteration, const kernels::StepValues& values);

  // Elastic jobs (JobSpec::elastic; shard_membership.cc, docs/design.md "Elastic jobs").
  // Freeze: no chunk completes an iteration past the latest any chunk here has completed,
  // which is returned, until ChangeMembership; the control plane freezes every core, takes the
  // maximum M and changes the membership from M + 2 on, so that no worker has begun that
  // iteration and every chunk still has M + 1 to complete (the joiners' first weights).
  // ChangeMembership: `ranks` are the members from `from_iteration` on; `joiners` (attached,
  // ExpectJoin) get each chunk's weights of from_iteration - 1 as it completes it; unfreezes.
  // `hold_at` (fewer members than the job's minimum): no chunk completes an iteration past it
  // until the next change; UINT64_MAX: unfrozen. ExpectJoin: `rank` may attach (its slot's earlier worker, if any, was dropped). Drop:
  // `rank` is gone for good: its connection closes, and no chunk waits for its copy any more
  // (the copies it pushed still count); a chunk that waited only for it steps now.
  std::uint64_t Freeze();
  // Elastic: every member and joiner is attached here now (the control plane asks each core
  // before it admits joiners: kAllAttached events may be stale by then).
  bool EveryoneAttached() const { return all_attached(); }
  void ChangeMembership(std::uint64_t from_iteration, const std::vector<std::uint32_t>& ranks,
                        const std::vector<std::uint32_t>& joiners,
                        std::uint64_t hold_at = UINT64_MAX);
  void ExpectJoin(std::uint32_t rank);
  void Drop(std::uint32_t rank);

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
  // REQUIRES on every entry point (STYLE.md "One owner per piece of state"): the caller runs on
  // the shard's thread, the one that made it: its core's loop thread (ServerCore::InstallShard,
  // the shard tests' ShardOnLoop), or the one thread of a fuzzer that drives it directly. Off
  // with NDEBUG, like every assert.
  void AssertOnOwnThread() const {
    assert(std::this_thread::get_id() == own_thread_ && "Shard used off its core's thread");
  }

  StatusOr<ChunkState*> FindChunk(const transport::WireHeader& header);
  // ResolveSlot of a PUSH or an INIT from `rank`.
  StatusOr<std::span<std::byte>> ResolvePush(std::uint32_t rank,
                                             const transport::WireHeader& header);
  StatusOr<std::span<std::byte>> ResolveInit(std::uint32_t rank,
                                             const transport::WireHeader& header);
  Status CheckAttach(const transport::WireHeader& header) const;
  Status Attach(transport::Connection& connection, const transport::WireHeader& header);
  void MaybeAggregate(ChunkState& state);
  // The copies a chunk's aggregation sums: all world_size, or (elastic) those in.
  std::uint32_t CopiesIn(const ChunkState& state) const;
  // JobSpec::most_copies (a home's chunk): what the copies in count between them, of copies
  // and of their racks' members.
  RackCount CountedCopies(const ChunkState& state) const;
  // A home's chunk: reads and checks the counts at the end of `rank`'s copy just in
  // (copy_count.h); InvalidArgument naming the fault closes the member's connection.
  Status TakeRackCount(std::uint32_t rank, const transport::WireHeader& header,
                       ChunkState& state);
  // A home's chunk's complete iteration: the mean over the copies its racks' sums count, the lr
  // scaled by their members (JobSpec::lr_scaling), or passed when they count no copy.
  void StepHomeChunk(ChunkState& state, kernels::OptimizerConfig config);
  // JobSpec::relay: the members of `iteration` (the rack's schedule's; a fixed rack's all), the
  // count the rack's sum carries for the homes' lr.
  std::uint32_t ScheduledMembers(std::uint64_t iteration, const ChunkState& state) const;
  // The chunk's next iteration is complete: the fused sum and step over its copies, then the
  // broadcast (StepChunk); or, JobSpec::relay, the rack's sum to the relay (RelaySum), or a sum
  // of no copies when the rack has nobody to push the iteration (RelayNoCopies).
  void StepChunk(ChunkState& state, const kernels::OptimizerConfig& config);
  void RelaySum(ChunkState& state, const kernels::OptimizerConfig& config);
  void RelayNoCopies(ChunkState& state);
  // Every copy the chunk's next iteration needs is in: all world_size (fixed), or (elastic)
  // every member of the iteration not excused, and at least one.
  bool Complete(const ChunkState& state) const;
  // Elastic: the chunk's next iteration will never have a copy (every member of it was dropped
  // before pushing it: the whole job was lost) and a change after it is decided. PassIteration
  // completes it without a step (the weights stay, nothing was summed), so the chunk reaches
  // the iteration a joiner starts from.
  bool Unpushed(const ChunkState& state) const;
  // The batches the job took before `iteration` (MemberSchedule's count; a fixed job's
  // iterations x world size); nullopt when the schedule no longer covers it.
  std::optional<std::uint64_t> BatchesBefore(std::uint64_t iteration) const;
  void PassIteration(ChunkState& state);
  // Elastic with JobSpec::lr_scaling: `config` with iteration's lr scaled by its member count.
  kernels::OptimizerConfig ScaledConfig(kernels::OptimizerConfig config,
                                        std::uint64_t iteration) const;
  // Elastic: whether `rank` may push iteration `iteration` (a member of it), and whether the
  // weights of `iteration` go to it (a member of it or of the next).
  bool MemberOf(std::uint64_t iteration, std::uint32_t rank) const {
    return !job_->elastic || schedule_.Contains(iteration, rank);
  }
  // A slot's joiner gets nothing before its first weights: the schedule may still name the
  // slot's earlier worker for older iterations (a chunk behind, passing one, sends it).
  bool Receives(std::uint64_t iteration, std::uint32_t rank) const {
    return !job_->elastic ||
           (!members_[rank].joining && iteration >= members_[rank].start_at &&
            (schedule_.Contains(iteration, rank) || schedule_.Contains(iteration + 1, rank)));
  }
  void AggregateAll();
  // The slots a chunk's aggregation reads: empty (every one) or a mask by rank.
  std::span<const std::uint8_t> Copies(const ChunkState& state) const;  // MaybeAggregate on every chunk (a membership change, a drop)
  // What iteration `iteration` steps with: the job's optimizer, or with per-iteration values
  // that iteration's; null while they have not come (the chunk waits: StepWith).
  const kernels::OptimizerConfig* StepConfig(std::uint64_t iteration);
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
  // Every worker that should be attached is: all world_size (fixed), or (elastic) every
  // member of the latest iteration not dropped, and every joiner.
  bool all_attached() const;
  // What the shard counts, in stats_ (the job-end log line) and the exported series
  // (shard_counters.cc).
  void CountReceived(std::uint64_t bytes, bool push);
  void CountSent(std::uint64_t bytes);
  void CountAggregation(std::chrono::steady_clock::time_point began);

  std::shared_ptr<const JobSpec> job_;
  keys::CoreIndex core_;
  EventSink sink_;
  const std::thread::id own_thread_ = std::this_thread::get_id();
  std::vector<ChunkState> chunks_;         // chunk_state.h
  std::vector<std::int32_t> local_index_;  // chunk id -> index in chunks_, -1 if not ours
  // Adopted data connections that have not attached yet (Attach moves one to its member).
  std::vector<std::shared_ptr<transport::Connection>> unattached_;
  std::vector<ShardMember> members_;  // by rank (member.h)
  std::uint32_t attached_ = 0;        // members with a connection
  bool closing_ = false;  // CloseAll in progress: closures are expected, not losses
  bool reported_left_early_ = false;
  // The checkpoint being collected: its iteration (0: none) and the chunks copied so far.
  std::uint64_t snapshot_iteration_ = 0;
  std::size_t snapshot_filled_ = 0;
  double snapshot_pause_ms_ = 0;
  std::shared_ptr<std::vector<ChunkSnapshot>> snapshot_;
  // JobSpec::per_iteration_values: the configs of iterations whose values came, until every
  // chunk is past them; the last iteration reported waiting for its values (kAwaitingValues).
  std::map<std::uint64_t, kernels::OptimizerConfig> step_configs_;
  // Optimizer steps taken before this job's iteration 0 (RestoreState): iteration t steps as
  // step t + step_offset_.
  std::uint64_t step_offset_ = 0;
  std::uint64_t reported_awaiting_ = 0;
  // Elastic jobs: the members of each iteration (from the earliest a chunk still needs), and
  // the iteration no chunk completes past while frozen (UINT64_MAX: not frozen).
  MemberSchedule schedule_;
  std::uint64_t frozen_at_ = UINT64_MAX;
  std::vector<const void*> inputs_;  // scratch for AggregateSlots
  std::vector<float*> state_ptrs_;
  ShardStats stats_;
  const CoreMetrics* metrics_;
  SharedSendQueue* fair_;
  // phub_core_round_seconds: aggregations since the round began, and when it began (the
  // previous round's end, or the shard's first push).
  std::size_t round_aggregations_ = 0;
  std::optional<std::chrono::steady_clock::time_point> round_began_;
};

}  // namespace phub::server
