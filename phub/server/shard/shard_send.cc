// Shard (shard.h): weights going back to workers. Broadcast sends a chunk's new weights to
// every worker, at once or in its turn on the core (fair_send_queue.h); SendTo sends one
// worker one chunk (whole, or with JobSpec::wire.weights as a change of its view, shard_view.cc)
// through the worker's SendScheduler. While any send of a chunk is queued the chunk does not
// aggregate (pending_sends): its weights are what is being sent.
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/server/shard/shard.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using transport::Op;
using transport::WireHeader;

void Shard::Broadcast(ChunkState& state) {
  state.announced = true;
  // Without pacing the queue never holds a unit: send at once, as a job alone always did.
  if (fair_ == nullptr || fair_->pacing().bytes_per_s <= 0) return SendToAll(state, nullptr);
  // The unit of fairness: one chunk to every worker (what it costs the core's NIC).
  const std::size_t cost = std::size_t{state.chunk->bytes()} * job_->world_size;
  // The chunk waits for its turn as it waits for its sends: it does not aggregate meanwhile
  // (so `state` stays as it is; a job's end drops its turns with its flow).
  ++state.pending_sends;
  const bool queued = fair_->Submit(job_->session, cost, [this, &state, cost] {
    AssertOnOwnThread();
    --state.pending_sends;
    SharedSendQueue* fair = fair_;
    const std::uint64_t flow = job_->session;
    SendToAll(state, [fair, flow, cost] { fair->Done(flow, cost); });
    MaybeAggregate(state);  // nothing was sent (every worker gone): the chunk must not wait
  });
  if (!queued) --state.pending_sends;  // the core stops sending for this job (phubd stops)
}

void Shard::SendToAll(ChunkState& state, std::function<void()> sent) {
  if (!sent) {
    for (std::uint32_t w = 0; w < job_->world_size; ++w) {
      SendTo(w, state, state.weights, state.iteration);
    }
    return;
  }
  // `sent` runs once every send has completed (the count starts at 1 so that sends completing
  // at once cannot run it before the loop is done).
  auto left = std::make_shared<std::uint32_t>(1);
  auto one_done = [left, sent = std::move(sent)] {
    if (--*left == 0 && sent) sent();
  };
  for (std::uint32_t w = 0; w < job_->world_size; ++w) {
    ++*left;
    if (!SendTo(w, state, state.weights, state.iteration, one_done)) --*left;
  }
  one_done();
}

bool Shard::SendTo(std::uint32_t rank, ChunkState& state, const AlignedBuffer& source,
                   std::uint64_t iteration, std::function<void()> sent) {
  ShardMember& member = members_[rank];
  if (!member.connection || member.connection->closed()) return false;
  // After its BYE a worker wants nothing more and is closing. On verbs a write would land in
  // its weight buffers (the caller's memory) before anything there could refuse it: an elastic
  // member leaving by Goodbye is still in the schedule of the iterations the others finish
  // without it, and its final weights were overwritten by those (the verbs elastic test).
  if (member.said_bye) return false;
  // Elastic: a joiner gets nothing before its first weights; a leaver nothing after its last.
  if (!Receives(iteration, rank)) return false;
  // Answered when its replay arrives.
  if (state.replay[rank] == ReplayState::kHeld) return false;
  Op op = Op::kWeights;
  const AlignedBuffer* from = &source;
  std::size_t bytes = state.chunk->bytes();
  if (job_->wire.weights) {
    // What the workers hold instead of the master weights: whole for a worker's first weights,
    // else the rounded change that took its view to `iteration` (computed once, when the chunk
    // aggregated: no send of it is queued when it is rewritten, MaybeAggregate waits).
    EnsureView(state);
    if (iteration == member.start_at) {
      op = Op::kInit;
      from = &source == &state.weights ? &state.view.current : &state.view.previous;
    } else if (&source == &state.weights && iteration == state.view.change_of) {
      from = &state.view.change;
      bytes = std::size_t{state.chunk->elements} * kernels::WireBytes(job_->wire.format);
    } else {
      spdlog::error("job '{}' core {}: rank {} started at iteration {}; chunk {}'s change is of "
                    "{}, not {}",
                    job_->name, core_, rank, member.start_at, state.chunk->id,
                    state.view.change_of, iteration);
      member.connection->Close(absl::InternalError(absl::StrCat(
          "phubd has no change of chunk ", state.chunk->id, " to iteration ", iteration,
          " for rank ", rank, ": rejoin the job")));
      return false;
    }
  }
  auto payload = std::span<const std::byte>(reinterpret_cast<const std::byte*>(from->data()), bytes);
  WireHeader header{op, rank, state.chunk->id, iteration, static_cast<std::uint32_t>(bytes)};
  // The chunk does not aggregate (which rewrites weights, previous, views and the change)
  // while a send is queued.
  ++state.pending_sends;
  member.sender->Send(header, payload,
                      [this, &state, bytes, sent = std::move(sent)](const Status& status) {
                        AssertOnOwnThread();
                        --state.pending_sends;
                        if (status.ok()) CountSent(bytes);
                        if (sent) sent();
                        MaybeAggregate(state);
                      });
  return true;
}

}  // namespace phub::server
