// Shard's part in recovery (docs/design.md "Recovery"): a worker that is gone and comes back,
// a job resumed from a checkpoint, and the copies a checkpoint is written from.
//
// The rule that makes a rejoin lose nothing: while a worker is gone, each chunk's count of
// iterations holding its copy (completed iterations, plus one if its push of the next is in)
// cannot change: no chunk completes an iteration without it. The rejoiner resumes at R, the
// minimum of that count over all chunks, from every chunk's weights of iteration R: a chunk
// that completed R + 1 already sends its previous weights; one still at R - 1 (waiting only
// for the survivors) sends them when it completes. It then replays iteration R + 1: its pushes
// of chunks that completed R + 1, or hold its copy already, are dropped (the chunk answers with
// its weights of R + 1, or with its broadcast). Its data for R + 1 depends only on (seed, rank,
// R + 1) and compute is deterministic, so what was kept equals what would have been sent.
#include <chrono>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "phub/server/shard/shard.h"
#include "phub/server/checkpoint/snapshot_buffers.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace {
std::vector<float> CopyOf(const AlignedBuffer& buffer) {
  return std::vector<float>(buffer.data(), buffer.data() + buffer.size());
}
void AssignOf(std::vector<float>& to, const AlignedBuffer& buffer) {
  to.assign(buffer.data(), buffer.data() + buffer.size());
}
void CopyInto(AlignedBuffer& buffer, const std::vector<float>& values) {
  std::memcpy(buffer.data(), values.data(), values.size() * sizeof(float));
}
}  // namespace

void Shard::LoadSnapshot(ChunkState& state, const ChunkSnapshot& snapshot) {
  // checkpoint_file.cc checked the sizes against the key table; the control plane checked that
  // a chunk ahead of the resume iteration has its previous weights.
  CopyInto(state.weights, snapshot.weights);
  for (std::size_t s = 0; s < state.state.size(); ++s) CopyInto(state.state[s], snapshot.state[s]);
  if (state.previous.size() != 0 && !snapshot.previous.empty()) {
    CopyInto(state.previous, snapshot.previous);
  }
  state.iteration = snapshot.iteration;
  state.initialized = true;
  state.announced = true;
  state.view.ready = false;  // wire_weights: the view starts again from these weights
}

RejoinPoint Shard::ForgetWorker(std::uint32_t rank) {
  AssertOnOwnThread();
  RejoinPoint point;
  if (rank >= job_->world_size) return point;
  ShardMember& member = members_[rank];
  ++member.forgotten;
  if (std::shared_ptr<transport::Connection> connection = std::move(member.connection)) {
    member.connection = nullptr;  // OnClosed then knows it is not a loss to report
    --attached_;
    // Closing fails the sends in flight and, through them, every WEIGHTS the scheduler still
    // holds: each chunk's pending_sends comes back down before the scheduler goes.
    auto sender = std::move(member.sender);
    connection->Close(absl::AbortedError("the worker's control connection was lost"));
  }
  member.resume_at = ShardMember::kNoResume;
  for (ChunkState& state : chunks_) {
    // A replay it owed dies with it; the next rejoin owes its own.
    state.replay[rank] = ReplayState::kNone;
    point.contributed = std::min(point.contributed, state.iteration + state.pushed[rank]);
    if (!state.initialized) ++point.uninitialized;
  }
  return point;
}

void Shard::ExpectRejoin(std::uint32_t rank, std::uint64_t iteration) {
  AssertOnOwnThread();
  if (rank >= job_->world_size) return;
  ShardMember& member = members_[rank];
  member.resume_at = iteration;
  member.replay_through = iteration + 1;
  member.start_at = iteration;
  // A connection that attached before this arrived (it cannot: the Welcome follows) would
  // not get its weights: send them now.
  if (member.connection) SendResumeWeights(rank);
}

void Shard::SendResumeWeights(std::uint32_t rank) {
  ShardMember& member = members_[rank];
  const std::uint64_t at = member.resume_at;
  member.resume_at = ShardMember::kNoResume;
  for (ChunkState& state : chunks_) {
    state.replay[rank] = ReplayState::kExpected;
    if (state.iteration == at) {
      SendTo(rank, state, state.weights, at);
      // Its copy of at + 1 is in already: the chunk may complete before the replay arrives,
      // and then its broadcast would reach a worker that has not asked for it yet.
      if (state.pushed[rank]) state.replay[rank] = ReplayState::kHeld;
    } else if (state.iteration == at + 1 && state.previous.size() != 0) {
      SendTo(rank, state, state.previous, at);
    } else if (state.iteration + 1 != at) {  // one behind: its broadcast will carry them
      spdlog::error("job '{}' core {}: rank {} resumes at iteration {} but chunk {} is at {}",
                    job_->name, core_, rank,
                    at, state.chunk->id, state.iteration);
      member.connection->Close(absl::InternalError(absl::StrCat(
          "cannot give rank ", rank, " the weights of iteration ", at, " for chunk ",
          state.chunk->id, ", which is at iteration ", state.iteration)));
      return;
    }
  }
}

std::optional<PushKind> Shard::ReplayOf(std::uint32_t rank, const transport::WireHeader& header,
                                        const ChunkState& state) const {
  // Only the one replay each chunk is owed, of exactly the iteration after the resume point.
  if (state.replay[rank] == ReplayState::kNone ||
      header.iteration != members_[rank].replay_through) {
    return std::nullopt;
  }
  if (header.iteration == state.iteration) return PushKind::kReplayDone;
  if (header.iteration == state.iteration + 1 && state.pushed[rank]) {
    return PushKind::kReplayCounted;
  }
  return std::nullopt;
}

void Shard::CopyForCheckpoint(ChunkState& state) {
  const auto start = std::chrono::steady_clock::now();
  if (snapshot_iteration_ != state.iteration) {
    if (snapshot_iteration_ != 0) {
      spdlog::warn("job '{}' core {}: checkpoint of iteration {} abandoned: chunk {} reached {} "
                   "first",
                   job_->name, core_, snapshot_iteration_, state.chunk->id, state.iteration);
    }
    snapshot_iteration_ = state.iteration;
    snapshot_filled_ = 0;
    snapshot_pause_ms_ = 0;
    snapshot_ = std::make_shared<std::vector<ChunkSnapshot>>();
    snapshot_->reserve(chunks_.size());
  }
  // Into the buffers of an earlier checkpoint (snapshot_buffers.h): assign keeps capacity.
  ChunkSnapshot copy = job_->snapshot_buffers ? job_->snapshot_buffers->Take(state.chunk->id)
                                              : ChunkSnapshot{};
  copy.chunk = state.chunk->id;
  copy.iteration = state.iteration + step_offset_;
  AssignOf(copy.weights, state.weights);
  copy.previous.clear();
  copy.state.resize(state.state.size());
  for (std::size_t s = 0; s < state.state.size(); ++s) AssignOf(copy.state[s], state.state[s]);
  snapshot_->push_back(std::move(copy));
  snapshot_pause_ms_ +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (++snapshot_filled_ < chunks_.size()) return;
  ShardEvent event{.kind = ShardEvent::Kind::kSnapshot, .core = core_};
  event.iteration = snapshot_iteration_;
  event.batches_before = BatchesBefore(state.iteration + 1);
  event.chunks = std::move(snapshot_);
  event.pause_ms = snapshot_pause_ms_;
  snapshot_iteration_ = 0;
  sink_(std::move(event));
}

std::vector<ChunkSnapshot> Shard::SnapshotNow() const {
  AssertOnOwnThread();
  std::vector<ChunkSnapshot> chunks;
  chunks.reserve(chunks_.size());
  for (const ChunkState& state : chunks_) {
    ChunkSnapshot copy;
    copy.chunk = state.chunk->id;
    copy.iteration = state.iteration + step_offset_;
    copy.weights = CopyOf(state.weights);
    if (state.previous.size() != 0 && state.iteration > 0) copy.previous = CopyOf(state.previous);
    for (const AlignedBuffer& s : state.state) copy.state.push_back(CopyOf(s));
    chunks.push_back(std::move(copy));
  }
  return chunks;
}

Status Shard::RestoreState(std::uint64_t steps, const std::vector<ChunkSnapshot>& chunks) {
  AssertOnOwnThread();
  for (const ChunkState& state : chunks_) {
    if (!state.initialized || state.iteration != 0 || state.arrived != 0 ||
        step_offset_ != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "chunk ", state.chunk->id, " of job '", job_->name, "' is past its start (iteration ",
          state.iteration + step_offset_, state.arrived ? ", pushes in" : "",
          state.initialized ? "" : ", no initial weights yet",
          "): an optimizer's state is restored after Init and before any push, on every rank"));
    }
  }
  for (ChunkState& state : chunks_) {
    const ChunkSnapshot& from = chunks[state.chunk->id];
    for (std::size_t s = 0; s < state.state.size(); ++s) CopyInto(state.state[s], from.state[s]);
  }
  step_offset_ = steps;
  return absl::OkStatus();
}

}  // namespace phub::server
