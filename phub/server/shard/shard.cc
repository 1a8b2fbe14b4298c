// Shard (shard.h): making it (every chunk's buffers, on the core's thread), the data
// connections it adopts, their ATTACH (the checks, the landing zones of a verbs set-up, the
// member it makes them) and their closing. What a connection then carries is in
// shard_push.cc; what goes back, shard_send.cc.
#include "phub/server/shard/shard.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using transport::Connection;
using transport::Op;
using transport::WireHeader;

namespace {

// Chunk `chunk`'s buffers for `job`, zeroed (so first touched on the calling thread).
ChunkState MakeChunkState(const JobSpec& job, const keys::Chunk& chunk) {
  ChunkState state;
  state.chunk = &chunk;
  state.slots = MakeSlots(job.world_size, chunk.elements, job.wire.format);
  if (job.wire.weights) {
    state.view.change = MakeWireBuffer(chunk.elements, job.wire.format);
    state.view.current = AlignedBuffer(chunk.elements);
    if (job.keep_previous) state.view.previous = AlignedBuffer(chunk.elements);
  }
  state.weights = AlignedBuffer(chunk.elements);
  const int state_arrays = kernels::StateArrays(job.optimizer.kind);
  for (int s = 0; s < state_arrays; ++s) state.state.emplace_back(chunk.elements);
  state.pushed.assign(job.world_size, 0);
  if (!job.most_copies.empty()) {
    state.copies.assign(job.world_size, 0);
    state.members.assign(job.world_size, 0);
  }
  state.replay.assign(job.world_size, ReplayState::kNone);
  if (job.keep_previous) state.previous = AlignedBuffer(chunk.elements);
  return state;
}

}  // namespace

Shard::Shard(std::shared_ptr<const JobSpec> job, keys::CoreIndex core, EventSink sink,
             const CoreMetrics* metrics, SharedSendQueue* fair)
    : job_(std::move(job)), core_(core), sink_(std::move(sink)), metrics_(metrics), fair_(fair) {
  const keys::KeyTable& table = job_->table;
  const std::uint32_t world = job_->world_size;
  const int state_arrays = kernels::StateArrays(job_->optimizer.kind);

  // Where each tensor starts in the flattened model, for weights loaded from a file.
  std::vector<std::uint64_t> tensor_start(table.tensors().size() + 1, 0);
  for (std::size_t t = 0; t < table.tensors().size(); ++t) {
    tensor_start[t + 1] = tensor_start[t] + table.tensors()[t].elements;
  }

  local_index_.assign(table.chunks().size(), -1);
  const auto& mine = table.chunks_on_core(core_);
  chunks_.resize(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) {
    const keys::Chunk& chunk = table.chunks()[mine[i]];
    ChunkState& state = chunks_[i];
    state = MakeChunkState(*job_, chunk);
    // Weights that come from another rack: nobody here may INIT them (ResolveSlot).
    if (job_->weights_from_upstream) state.initialized = true;
    if (job_->resume) {
      LoadSnapshot(state, job_->resume->chunks[chunk.id]);
    } else if (!job_->initial_weights.empty()) {
      std::memcpy(state.weights.data(),
                  job_->initial_weights.data() + tensor_start[chunk.tensor] + chunk.offset,
                  chunk.bytes());
      state.initialized = true;
    }
    local_index_[chunk.id] = static_cast<std::int32_t>(i);
  }
  // A job resumed from a checkpoint: every worker resumes, at the checkpoint's iteration.
  ShardMember member;
  if (job_->resume) {
    member.resume_at = job_->resume_iteration;
    member.replay_through = job_->resume_iteration + 1;
    member.start_at = job_->resume_iteration;
  }
  members_.assign(world, member);
  if (job_->elastic) {
    schedule_.Reset(job_->resume_iteration + 1, job_->initial_members, job_->batches_before);
  }

  inputs_.resize(world);
  state_ptrs_.resize(state_arrays);
  if (metrics_) metrics_->chunks->Add(static_cast<double>(chunks_.size()));
  spdlog::debug("job '{}' core {}: shard holds {} chunks, {} bytes of weights", job_->name,
                core_, chunks_.size(), table.bytes_on_core(core_));
}

Shard::~Shard() {
  AssertOnOwnThread();
  CloseAll(absl::OkStatus());
  if (metrics_) metrics_->chunks->Add(-static_cast<double>(chunks_.size()));
}

std::vector<std::span<std::byte>> Shard::Buffers() {
  AssertOnOwnThread();
  std::vector<std::span<std::byte>> buffers;
  for (ChunkState& state : chunks_) {
    buffers.push_back(std::as_writable_bytes(state.slots.span()));
    buffers.push_back(std::as_writable_bytes(state.weights.span()));
    for (AlignedBuffer* b :
         {&state.previous, &state.view.current, &state.view.previous, &state.view.change}) {
      if (b->size() != 0) buffers.push_back(std::as_writable_bytes(b->span()));
    }
  }
  return buffers;
}

StatusOr<std::vector<transport::LandingZone>> Shard::LandingZones(const Connection&,
                                                                  const WireHeader* attach) {
  AssertOnOwnThread();
  if (attach == nullptr) {
    return absl::InvalidArgumentError("a data connection must say who it is (ATTACH) first");
  }
  PHUB_RETURN_IF_ERROR(CheckAttach(*attach));
  const std::uint32_t rank = attach->worker;
  const std::uint64_t resume_at = members_[rank].resume_at;
  std::vector<transport::LandingZone> zones;
  for (ChunkState& state : chunks_) {
    const std::uint32_t elements = state.chunk->elements;
    // A worker that resumes pushes every chunk from the iteration after its resume point.
    const std::uint64_t next_push =
        resume_at != ShardMember::kNoResume ? resume_at + 1 : state.iteration + 1;
    zones.push_back({Op::kPush, rank, state.chunk->id, next_push,
                     SlotOf(state.slots, rank, elements, job_->wire.format)});
    if (rank == 0 && !state.initialized) {
      zones.push_back({Op::kInit, 0, state.chunk->id, 0, std::as_writable_bytes(state.weights.span())});
    }
  }
  return zones;
}

void Shard::Adopt(std::shared_ptr<Connection> connection) {
  AssertOnOwnThread();
  unattached_.push_back(connection);
  connection->Start();
}

Status Shard::AdoptAttached(std::shared_ptr<Connection> connection, const WireHeader& attach) {
  AssertOnOwnThread();
  unattached_.push_back(connection);
  return Attach(*connection, attach);
}

void Shard::CloseAll(const Status& why) {
  AssertOnOwnThread();
  closing_ = true;
  // Close() calls back into OnClosed, which edits these lists: work on copies.
  auto unattached = unattached_;
  std::vector<std::shared_ptr<Connection>> attached;
  for (const ShardMember& member : members_) attached.push_back(member.connection);
  for (auto& c : unattached) c->Close(why);
  for (auto& c : attached) {
    if (c) c->Close(why);
  }
}

Status Shard::CheckAttach(const WireHeader& header) const {
  if (header.op != Op::kAttach) {
    return absl::InvalidArgumentError(
        absl::StrCat("first message must be ATTACH, got ", OpName(header.op)));
  }
  if (header.payload_bytes != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ATTACH carries ", header.payload_bytes, " bytes; it has no payload"));
  }
  if (header.chunk != core_) {
    return absl::InvalidArgumentError(absl::StrCat("ATTACH for core ", header.chunk,
                                                   " reached core ", core_));
  }
  if (header.iteration != job_->session) {
    return absl::PermissionDeniedError(
        "ATTACH with a session that is not the running job's: connect through the handshake");
  }
  if (header.worker >= job_->world_size) {
    return absl::InvalidArgumentError(absl::StrCat("ATTACH from rank ", header.worker,
                                                   " in a job of ", job_->world_size));
  }
  const ShardMember& member = members_[header.worker];
  if (member.connection) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", header.worker, " is already attached to core ", core_));
  }
  if (job_->elastic && !member.joining &&
      !(schedule_.Contains(schedule_.LatestFrom(), header.worker) && !member.seen)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", header.worker, " attaches to core ", core_,
        " but is not a member of the elastic job, nor joining it: say Hello first"));
  }
  if (member.seen && member.resume_at == ShardMember::kNoResume && !member.joining) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", header.worker, " attaches to core ", core_,
        " again without rejoining: a worker that lost its connection says Hello again"));
  }
  return absl::OkStatus();
}

Status Shard::Attach(Connection& connection, const WireHeader& header) {
  PHUB_RETURN_IF_ERROR(CheckAttach(header));
  auto it = std::find_if(unattached_.begin(), unattached_.end(),
                         [&](const auto& c) { return c.get() == &connection; });
  if (it == unattached_.end()) return absl::InternalError("ATTACH on a connection never adopted");
  ShardMember& member = members_[header.worker];
  member.connection = *it;
  member.sender = transport::SendScheduler::Create(*it, job_->send_window_bytes);
  unattached_.erase(it);
  connection.set_tag(header.worker);
  member.seen = true;
  ++attached_;
  if (member.resume_at != ShardMember::kNoResume) SendResumeWeights(header.worker);
  spdlog::debug("job '{}' core {}: rank {} attached from {} ({}/{})", job_->name, core_,
                header.worker, connection.peer(), attached_, job_->world_size);
  if (all_attached()) {
    sink_(ShardEvent{.kind = ShardEvent::Kind::kAllAttached, .core = core_});
    for (ChunkState& state : chunks_) {
      if (Announceable(state)) Broadcast(state);
    }
  }
  return absl::OkStatus();
}

void Shard::OnClosed(Connection& connection, const Status& why) {
  AssertOnOwnThread();
  if (connection.tag() < 0) {
    auto it = std::find_if(unattached_.begin(), unattached_.end(),
                           [&](const auto& c) { return c.get() == &connection; });
    if (it != unattached_.end()) unattached_.erase(it);
    if (!closing_) {
      spdlog::warn("job '{}' core {}: dropped connection from {}: {}", job_->name, core_,
                   connection.peer(),
                   why.message());
      sink_(ShardEvent{.kind = ShardEvent::Kind::kBadPeer,
                       .core = core_,
                       .reason = std::string(why.message())});
    }
    return;
  }
  const auto rank = static_cast<std::uint32_t>(connection.tag());
  const ShardMember& member = members_[rank];
  // The member keeps its connection: only ForgetWorker frees it (and it closes the connection
  // it forgets without a report).
  if (closing_ || member.said_bye || member.connection.get() != &connection) return;
  spdlog::warn("job '{}' core {}: lost rank {} ({}): {}", job_->name, core_, rank,
               connection.peer(), why.message());
  ShardEvent lost{.kind = ShardEvent::Kind::kWorkerLost,
                  .core = core_,
                  .rank = rank,
                  .reason = std::string(why.message())};
  lost.epoch = member.forgotten;
  sink_(std::move(lost));
}

}  // namespace phub::server
