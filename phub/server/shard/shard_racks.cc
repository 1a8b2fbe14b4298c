// Shard's part in racks of racks (docs/design.md "Racks of racks"; chunk_relay.h,
// copy_count.h). On a rack's PBox (JobSpec::relay) a chunk's complete iteration is summed and
// handed to the relay with the rack's counts of that iteration — the copies in and the members
// its schedule gives — and the weights come back in OnRelayed. On a chunk's home (JobSpec::
// most_copies) each rack's sum arrives with those counts, checked as it comes (TakeRackCount),
// and the chunk steps with the mean over every copy summed across racks and, with
// --lr-scaling, the lr scaled by the members of every rack over their start sizes.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/server/shard/copy_count.h"
#include "phub/server/shard/shard.h"

namespace phub::server {

using transport::WireHeader;

Status Shard::TakeRackCount(std::uint32_t rank, const WireHeader& header, ChunkState& state) {
  const std::span<std::byte> slot =
      SlotOf(state.slots, rank, state.chunk->elements, job_->wire.format);
  StatusOr<RackCount> count = ReadRackCount(slot, job_->wire.format, job_->most_copies[rank]);
  if (!count.ok()) {
    // A PBox that sends counts no rack could have is broken or hostile: its link closes
    // (the home never divides by them), and its rack's part stalls on the lost link.
    return absl::InvalidArgumentError(absl::StrCat(
        "PUSH of chunk ", header.chunk, " for iteration ", header.iteration, " from the PBox of ",
        "rack ", rank, ": ", count.status().message()));
  }
  state.copies[rank] = count->copies;
  state.members[rank] = count->members;
  return absl::OkStatus();
}

RackCount Shard::CountedCopies(const ChunkState& state) const {
  const std::span<const std::uint8_t> which = Copies(state);
  std::uint64_t copies = 0, members = 0;
  for (std::uint32_t rank = 0; rank < job_->world_size; ++rank) {
    if (!which.empty() && !which[rank]) continue;
    copies += state.copies[rank];
    members += state.members[rank];
  }
  // Each count was checked against its member's rack (most_copies) as it came: the totals are
  // at most the job's most workers, which the Hellos bounded far below 2^32.
  return {.copies = static_cast<std::uint32_t>(copies),
          .members = static_cast<std::uint32_t>(members)};
}

void Shard::StepHomeChunk(ChunkState& state, kernels::OptimizerConfig config) {
  // The mean is over the workers' copies the racks' sums hold this iteration, not over the
  // job's most workers (an elastic rack has fewer, and changes).
  const RackCount counted = CountedCopies(state);
  if (counted.copies == 0) {
    // Every rack's sum held no copy (each rack's members were all lost, or all left): as
    // with an iteration nobody pushes, the weights stay.
    state.arrived = 0;
    std::fill(state.pushed.begin(), state.pushed.end(), 0);
    return PassIteration(state);
  }
  config.copies = counted.copies;
  // The members every rack's schedule gives the iteration, the same for every chunk of it
  // (its copies are not: a member lost mid-iteration), over the racks' start sizes. kFixed
  // leaves the lr's bits alone.
  config.lr = kernels::ScaledLr(job_->lr_scaling, config.lr, counted.members,
                                job_->lr_start_members);
  StepChunk(state, config);
}

std::uint32_t Shard::ScheduledMembers(std::uint64_t iteration, const ChunkState& state) const {
  if (!job_->elastic) return job_->world_size;
  // Complete and Unpushed, which come first, found the iteration's entry: it is there.
  const MemberSchedule::Entry* members = schedule_.At(iteration);
  return members != nullptr ? static_cast<std::uint32_t>(members->ranks.size()) : CopiesIn(state);
}

void Shard::RelaySum(ChunkState& state, const kernels::OptimizerConfig& config) {
  // The rack's sum (kAverage over one copy) goes on to the chunk's home PBox with the counts
  // of its copies and of the iteration's members; the chunk waits for its weights as it waits
  // for a send (OnRelayed).
  const auto began = std::chrono::steady_clock::now();
  for (std::size_t s = 0; s < state_ptrs_.size(); ++s) state_ptrs_[s] = state.state[s].data();
  AggregateSlots(job_->wire.format, state.slots, job_->world_size, Copies(state),
                 state.chunk->elements, std::as_const(state.weights).span(),
                 job_->relay->Partial(state.chunk->id), state_ptrs_, config,
                 state.iteration + 1 + step_offset_, inputs_);
  const RackCount count{.copies = CopiesIn(state),
                        .members = ScheduledMembers(state.iteration + 1, state)};
  state.arrived = 0;
  std::fill(state.pushed.begin(), state.pushed.end(), 0);
  CountAggregation(began);
  ++state.pending_sends;
  job_->relay->Forward(core_, state.chunk->id, count);
}

void Shard::RelayNoCopies(ChunkState& state) {
  // Not passed here as a one-rack job passes it: the homes wait for every rack's sum of every
  // iteration. A sum of no copies counts for nothing there, and the other racks' step comes
  // back as this iteration's weights (the joiner this rack waits for starts from them). Its
  // members (all lost, the schedule still names them) count towards the lr as in one rack.
  const std::span<float> partial = job_->relay->Partial(state.chunk->id);
  std::fill(partial.begin(), partial.end(), 0.0f);
  ++state.pending_sends;
  job_->relay->Forward(core_, state.chunk->id,
                       {.copies = 0, .members = ScheduledMembers(state.iteration + 1, state)});
}

void Shard::OnRelayReady() {
  AssertOnOwnThread();
  for (ChunkState& state : chunks_) {
    // Nothing is sent from the weights before this: the chunk was not announced.
    const std::span<const float> landed = job_->relay->Landed(state.chunk->id);
    std::copy(landed.begin(), landed.end(), state.weights.data());
    state.relay_ready = true;
    state.initialized = true;
    if (Announceable(state)) Broadcast(state);
  }
}

void Shard::OnRelayed(std::uint32_t chunk) {
  AssertOnOwnThread();
  if (chunk >= local_index_.size() || local_index_[chunk] < 0) return;
  ChunkState& state = chunks_[local_index_[chunk]];
  // No send of the weights is queued: the chunk aggregated (MaybeAggregate waits for them).
  const std::span<const float> landed = job_->relay->Landed(chunk);
  std::copy(landed.begin(), landed.end(), state.weights.data());
  --state.pending_sends;
  ++state.iteration;
  if (job_->wire.weights) UpdateView(state, /*swapped=*/false);
  Broadcast(state);
  // Nobody may take these weights (an elastic rack with no member until a joiner comes): no
  // send completes to go on from, so the next iteration is looked at now.
  MaybeAggregate(state);
}

}  // namespace phub::server
