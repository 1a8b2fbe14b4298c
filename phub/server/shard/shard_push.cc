// Shard (shard.h): what workers send a core, and what it does with it. ResolveSlot is the one
// check of every message (where its payload lands, or why it is refused); OnReceived counts a
// push, takes INIT and BYE; MaybeAggregate steps a chunk once every copy is in (or, racks of
// racks, hands it to shard_racks.cc).
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/server/shard/shard.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using transport::Connection;
using transport::Op;
using transport::WireHeader;

StatusOr<ChunkState*> Shard::FindChunk(const WireHeader& header) {
  if (header.chunk >= local_index_.size() || local_index_[header.chunk] < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(header.op), " for chunk ", header.chunk, " which core ", core_,
        " does not own (the job has ", local_index_.size(),
        " chunks): the worker's key table disagrees with phubd's"));
  }
  ChunkState& state = chunks_[local_index_[header.chunk]];
  // Pushes travel in the job's wire format; INIT (rank 0's initial weights) in float32.
  const std::uint64_t expected =
      header.op == Op::kPush
          ? std::uint64_t{state.chunk->elements} * kernels::WireBytes(job_->wire.format)
          : state.chunk->bytes();
  if (header.payload_bytes != expected) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(header.op), " of chunk ", header.chunk, " carries ", header.payload_bytes,
        " bytes; the chunk has ", expected,
        header.op == Op::kPush && job_->wire.format != kernels::WireFormat::kFp32
            ? absl::StrCat(" (", state.chunk->elements, " elements in the job's ",
                           kernels::WireFormatName(job_->wire.format), ")")
            : std::string()));
  }
  return &state;
}

StatusOr<std::span<std::byte>> Shard::ResolveSlot(Connection& connection,
                                                  const WireHeader& header) {
  AssertOnOwnThread();
  // The one validation point of every message a worker sends this core: OnReceived trusts
  // what passes here.
  if (connection.tag() < 0) {
    PHUB_RETURN_IF_ERROR(CheckAttach(header));
    return std::span<std::byte>{};
  }
  const auto rank = static_cast<std::uint32_t>(connection.tag());
  if (members_[rank].said_bye) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(header.op), " from rank ", rank, " after its BYE: the connection closes next"));
  }
  if (header.worker != rank) {
    return absl::InvalidArgumentError(absl::StrCat(OpName(header.op), " names worker ",
                                                   header.worker, " on the connection of rank ",
                                                   rank));
  }
  switch (header.op) {
    case Op::kPush:
      return ResolvePush(rank, header);
    case Op::kInit:
      return ResolveInit(rank, header);
    case Op::kBye:
      if (header.payload_bytes != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("BYE from rank ", rank, " carries ", header.payload_bytes, " bytes"));
      }
      return std::span<std::byte>{};
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "unexpected ", OpName(header.op), " from rank ", rank,
          header.op == Op::kAttach ? " (already attached)" : ""));
  }
}

StatusOr<std::span<std::byte>> Shard::ResolvePush(std::uint32_t rank, const WireHeader& header) {
  PHUB_ASSIGN_OR_RETURN(ChunkState * state, FindChunk(header));
  if (!state->initialized) {
    return absl::FailedPreconditionError(absl::StrCat(
        "PUSH of chunk ", header.chunk, " before its initial weights arrived from rank 0"));
  }
  ShardMember& member = members_[rank];
  member.push_kind = PushKind::kCount;
  if (header.iteration != state->iteration + 1 || state->pushed[rank]) {
    // A worker back from a failure replays the iteration in flight: a copy that already
    // counts is dropped. It lands in the worker's slot all the same (over verbs it is
    // written there before this runs): either that slot is free until its next push, or
    // it holds the same bits (the replay computes them again from the same weights and data).
    if (std::optional<PushKind> replay = ReplayOf(rank, header, *state)) {
      member.push_kind = *replay;
      return SlotOf(state->slots, rank, state->chunk->elements, job_->wire.format);
    }
  }
  if (header.iteration != state->iteration + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PUSH of chunk ", header.chunk, " for iteration ", header.iteration,
        "; the chunk expects iteration ", state->iteration + 1));
  }
  if (!MemberOf(header.iteration, rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PUSH of chunk ", header.chunk, " for iteration ", header.iteration, " from rank ", rank,
        ", which is not a member of that iteration (it left the elastic job before it, or "
        "joins after it)"));
  }
  if (state->pushed[rank]) {
    return absl::InvalidArgumentError(absl::StrCat("second PUSH of chunk ", header.chunk,
                                                   " in iteration ", header.iteration));
  }
  return SlotOf(state->slots, rank, state->chunk->elements, job_->wire.format);
}

StatusOr<std::span<std::byte>> Shard::ResolveInit(std::uint32_t rank, const WireHeader& header) {
  if (rank != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("INIT from rank ", rank, ": only rank 0 sends initial weights"));
  }
  PHUB_ASSIGN_OR_RETURN(ChunkState * state, FindChunk(header));
  if (header.iteration != 0) {
    return absl::InvalidArgumentError(absl::StrCat("INIT of chunk ", header.chunk,
                                                   " for iteration ", header.iteration,
                                                   "; initial weights are iteration 0"));
  }
  if (state->initialized) {
    return absl::InvalidArgumentError(absl::StrCat(
        "INIT of chunk ", header.chunk,
        " which already has weights (sent before, or loaded by phubd from a file)"));
  }
  return std::as_writable_bytes(state->weights.span());
}

Status Shard::OnReceived(Connection& connection, const WireHeader& header) {
  AssertOnOwnThread();
  // ResolveSlot accepted this message just before: no check is repeated here.
  if (connection.tag() < 0) return Attach(connection, header);
  const auto rank = static_cast<std::uint32_t>(connection.tag());
  switch (header.op) {
    case Op::kPush: {
      ChunkState& state = chunks_[local_index_[header.chunk]];
      CountReceived(header.payload_bytes, /*push=*/true);
      state.replay[rank] = ReplayState::kNone;  // its replay of this chunk, if it owed one, is in
      const PushKind kind = members_[rank].push_kind;
      if (kind == PushKind::kReplayDone) {
        SendTo(rank, state, state.weights, state.iteration);
        return absl::OkStatus();
      }
      if (kind == PushKind::kReplayCounted) {
        // The chunk may have completed the iteration while this copy was arriving: its
        // broadcast skipped this worker (held for its replay), so the answer goes now.
        if (state.iteration == header.iteration) {
          SendTo(rank, state, state.weights, state.iteration);
        }
        return absl::OkStatus();
      }
      if (!job_->most_copies.empty()) PHUB_RETURN_IF_ERROR(TakeRackCount(rank, header, state));
      state.pushed[rank] = 1;
      ++state.arrived;
      MaybeAggregate(state);
      CheckCompletable(state);
      return absl::OkStatus();
    }
    case Op::kInit: {
      ChunkState& state = chunks_[local_index_[header.chunk]];
      state.initialized = true;
      CountReceived(header.payload_bytes, /*push=*/false);
      if (job_->relay) job_->relay->Initialized(core_, state.chunk->id, state.weights.span());
      if (Announceable(state)) Broadcast(state);
      return absl::OkStatus();
    }
    case Op::kBye:
      members_[rank].said_bye = true;
      if (job_->elastic) {
        // A member of an elastic job that leaves: no chunk waits for it (what it pushed counts).
        members_[rank].excused_below = UINT64_MAX;
        members_[rank].joining = false;  // a joiner that leaves before its change: never a member
        AggregateAll();
        return absl::OkStatus();
      }
      for (const ChunkState& state : chunks_) CheckCompletable(state);
      return absl::OkStatus();
    default:
      return absl::InternalError(absl::StrCat(OpName(header.op), " from rank ", rank,
                                              " passed ResolveSlot"));
  }
}

bool Shard::Announceable(const ChunkState& state) const {
  return state.initialized && !state.announced && all_attached() &&
         (!job_->relay || state.relay_ready);
}

const kernels::OptimizerConfig* Shard::StepConfig(std::uint64_t iteration) {
  if (!job_->per_iteration_values) return &job_->optimizer;
  if (auto it = step_configs_.find(iteration); it != step_configs_.end()) return &it->second;
  if (reported_awaiting_ < iteration) {
    // The control path may simply be behind the data path; the job acts if it stays so.
    reported_awaiting_ = iteration;
    sink_(ShardEvent{.kind = ShardEvent::Kind::kAwaitingValues, .core = core_,
                     .iteration = iteration});
  }
  return nullptr;
}

void Shard::StepWith(std::uint64_t iteration, const kernels::StepValues& values) {
  AssertOnOwnThread();
  if (!job_->per_iteration_values) return;
  step_configs_[iteration] = kernels::WithValues(job_->optimizer, values);
  std::uint64_t oldest_in_flight = UINT64_MAX;
  for (ChunkState& state : chunks_) {
    if (state.iteration + 1 == iteration) MaybeAggregate(state);
    oldest_in_flight = std::min(oldest_in_flight, state.iteration + 1);
  }
  // Values of iterations every chunk has stepped are not needed again (a rejoiner's replayed
  // pushes of those are dropped, never summed).
  step_configs_.erase(step_configs_.begin(), step_configs_.lower_bound(oldest_in_flight));
}

std::span<const std::uint8_t> Shard::Copies(const ChunkState& state) const {
  // Elastic: the copies in (members of the iteration, and what a dropped one pushed first);
  // fixed: every slot (all are in).
  return job_->elastic ? std::span<const std::uint8_t>(state.pushed)
                       : std::span<const std::uint8_t>();
}

std::uint32_t Shard::CopiesIn(const ChunkState& state) const {
  const std::span<const std::uint8_t> which = Copies(state);
  if (which.empty()) return job_->world_size;
  return static_cast<std::uint32_t>(std::count(which.begin(), which.end(), 1));
}

void Shard::MaybeAggregate(ChunkState& state) {
  if (state.pending_sends > 0 || state.iteration >= frozen_at_) return;
  if (Unpushed(state)) return job_->relay ? RelayNoCopies(state) : PassIteration(state);
  if (!Complete(state)) return;
  const kernels::OptimizerConfig* config = StepConfig(state.iteration + 1);
  if (config == nullptr) return;  // StepWith steps it
  // Racks of racks (shard_racks.cc): a rack's part passes its sum on; a home's chunk steps by
  // the counts the racks' sums carry.
  if (job_->relay) return RelaySum(state, *config);
  if (!job_->most_copies.empty()) return StepHomeChunk(state, *config);
  kernels::OptimizerConfig adjusted;
  if (job_->lr_scaling != kernels::LrScaling::kFixed) {
    config = &(adjusted = ScaledConfig(*config, state.iteration + 1));
  }
  StepChunk(state, *config);
}

void Shard::StepChunk(ChunkState& state, const kernels::OptimizerConfig& config) {
  const auto began = std::chrono::steady_clock::now();
  // A home's chunk ends in its counts (copy_count.h): no weights, so not stepped.
  const std::uint32_t elements = state.chunk->elements;
  const std::size_t stepped = elements - (job_->most_copies.empty() ? 0 : kCountElements);
  for (std::size_t s = 0; s < state_ptrs_.size(); ++s) state_ptrs_[s] = state.state[s].data();
  if (state.previous.size() != 0) {
    // Kept for a rejoin: the new weights go to the other buffer and the two trade places, so
    // keeping the previous weights costs no copy (no send of either is queued: see above).
    AggregateSlots(job_->wire.format, state.slots, job_->world_size, Copies(state), elements,
                   std::as_const(state.weights).span().first(stepped),
                   state.previous.span().first(stepped), state_ptrs_, config,
                   state.iteration + 1 + step_offset_, inputs_);
    std::swap(state.weights, state.previous);
  } else {
    AggregateSlots(job_->wire.format, state.slots, job_->world_size, Copies(state), elements, {},
                   state.weights.span().first(stepped), state_ptrs_, config,
                   state.iteration + 1 + step_offset_, inputs_);
  }
  ++state.iteration;
  if (job_->wire.weights) UpdateView(state, /*swapped=*/state.previous.size() != 0);
  state.arrived = 0;
  std::fill(state.pushed.begin(), state.pushed.end(), 0);
  CountAggregation(began);
  if (job_->checkpoint_every > 0 && state.iteration % job_->checkpoint_every == 0) {
    CopyForCheckpoint(state);
  }
  Broadcast(state);
}

void Shard::CheckCompletable(const ChunkState& state) {
  // An elastic job goes on without a member that left (Complete excuses it).
  if (job_->elastic || reported_left_early_ || state.arrived == 0) return;
  for (std::uint32_t w = 0; w < job_->world_size; ++w) {
    if (!members_[w].said_bye || state.pushed[w]) continue;
    reported_left_early_ = true;
    const std::string reason = absl::StrCat(
        "rank ", w, " left (BYE) but chunk ", state.chunk->id, " of iteration ",
        state.iteration + 1, " has pushes from other workers and needs rank ", w, "'s too");
    spdlog::warn("job '{}' core {}: {}", job_->name, core_, reason);
    sink_(ShardEvent{
        .kind = ShardEvent::Kind::kLeftEarly, .core = core_, .rank = w, .reason = reason});
    return;
  }
}

}  // namespace phub::server
