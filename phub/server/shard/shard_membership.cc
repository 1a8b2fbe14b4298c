// Shard's part in elastic jobs (JobSpec::elastic; docs/design.md "Elastic jobs"): which copies
// a chunk's iteration needs, and membership changes at an iteration boundary.
//
// The rule: iteration t of a chunk completes once every member of t (MemberSchedule) that is
// not excused has its copy in, and steps with the mean of the copies in, in rank order. A
// member is excused from every iteration once it is dropped (lost, or its BYE came): the
// copies it pushed before still count, so a member that finished iteration t and said BYE
// contributed exactly iterations up to t everywhere. A change takes effect at an iteration no
// chunk has begun to complete (Freeze), so every chunk sums that iteration over the same
// members.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/server/shard/shard.h"
#include "spdlog/spdlog.h"

namespace phub::server {

bool Shard::Complete(const ChunkState& state) const {
  if (!job_->elastic) return state.arrived >= job_->world_size;
  if (state.arrived == 0) return false;
  const std::uint64_t next = state.iteration + 1;
  const MemberSchedule::Entry* members = schedule_.At(next);
  if (members == nullptr) return false;
  for (std::uint32_t rank : members->ranks) {
    if (!state.pushed[rank] && next >= members_[rank].excused_below) return false;
  }
  return true;
}

std::optional<std::uint64_t> Shard::BatchesBefore(std::uint64_t iteration) const {
  if (!job_->elastic) return (iteration - 1) * job_->world_size;
  if (schedule_.At(iteration) == nullptr) return std::nullopt;
  return schedule_.MemberIterationsBefore(iteration);
}

bool Shard::Unpushed(const ChunkState& state) const {
  // A chunk without its initial weights has nothing to pass on to a joiner.
  if (!job_->elastic || state.arrived != 0 || !state.initialized) return false;
  const std::uint64_t next = state.iteration + 1;
  // Only before a change that brings somebody who will push (a joiner): the latest entry's
  // members may yet come, and a job whose members all said BYE is ending, not waiting.
  const std::uint64_t latest = schedule_.LatestFrom();
  if (next >= latest) return false;
  const std::vector<std::uint32_t>& coming = schedule_.Latest().ranks;
  if (std::none_of(coming.begin(), coming.end(), [&](std::uint32_t rank) {
        return latest >= members_[rank].excused_below;
      })) {
    return false;
  }
  const MemberSchedule::Entry* members = schedule_.At(next);
  if (members == nullptr) return false;
  for (std::uint32_t rank : members->ranks) {
    if (next >= members_[rank].excused_below) return false;
  }
  return true;
}

void Shard::PassIteration(ChunkState& state) {
  if (state.previous.size() != 0) {
    std::copy(state.weights.data(), state.weights.data() + state.chunk->elements,
              state.previous.data());
  }
  ++state.iteration;
  if (job_->wire.weights) UpdateView(state, /*swapped=*/false);
  if (job_->checkpoint_every > 0 && state.iteration % job_->checkpoint_every == 0) {
    CopyForCheckpoint(state);
  }
  Broadcast(state);
  MaybeAggregate(state);  // the next may pass too: at most up to the change's iteration
}

kernels::OptimizerConfig Shard::ScaledConfig(kernels::OptimizerConfig config,
                                             std::uint64_t iteration) const {
  // The members the schedule gives the iteration, not the copies in: every chunk steps an
  // iteration with one lr, and a worker can tell which (MembersOf) — a member lost during it
  // changes the copies summed, not the lr.
  const MemberSchedule::Entry* members = schedule_.At(iteration);
  if (members == nullptr) return config;
  config.lr = kernels::ScaledLr(job_->lr_scaling, config.lr,
                                static_cast<std::uint32_t>(members->ranks.size()),
                                job_->lr_start_members);
  return config;
}

bool Shard::all_attached() const {
  if (!job_->elastic) return attached_ == job_->world_size;
  for (std::uint32_t rank = 0; rank < job_->world_size; ++rank) {
    const ShardMember& member = members_[rank];
    const bool expected =
        member.joining || (schedule_.Contains(schedule_.LatestFrom(), rank) &&
                           member.excused_below != UINT64_MAX);
    if (expected && !member.connection) return false;
  }
  return true;
}

void Shard::AggregateAll() {
  for (ChunkState& state : chunks_) MaybeAggregate(state);
}

std::uint64_t Shard::Freeze() {
  AssertOnOwnThread();
  std::uint64_t latest = 0;
  for (const ChunkState& state : chunks_) latest = std::max(latest, state.iteration);
  frozen_at_ = latest;
  return latest;
}

void Shard::ChangeMembership(std::uint64_t from_iteration, const std::vector<std::uint32_t>& ranks,
                             const std::vector<std::uint32_t>& joiners, std::uint64_t hold_at) {
  AssertOnOwnThread();
  if (!job_->elastic) return;
  schedule_.Change(from_iteration, ranks);
  for (std::uint32_t rank : joiners) {
    if (rank >= job_->world_size) continue;
    ShardMember& member = members_[rank];
    if (!member.joining) continue;  // dropped meanwhile: it stays excused
    member.joining = false;
    // Its first weights are of from_iteration - 1 (whole, with a compact wire): each chunk is
    // behind that (Freeze), and its broadcast on completing it reaches the joiner.
    member.start_at = from_iteration - 1;
    member.excused_below = from_iteration;
    // It attached (a change waits for that) before anyone knew its first iteration: its
    // connection learns it now, before the first weights go (transport::Connection).
    if (member.connection) {
      using transport::Op;
      const bool whole_first = job_->wire.weights;
      member.connection->ExpectIteration(Op::kPush, rank, from_iteration);
      member.connection->ExpectIteration(whole_first ? Op::kInit : Op::kWeights, rank,
                                         from_iteration - 1);
      if (whole_first) member.connection->ExpectIteration(Op::kWeights, rank, from_iteration);
    }
  }
  frozen_at_ = hold_at;
  // Entries no chunk will read again: a chunk reads its next iteration's (Complete) and, for
  // a broadcast still queued, its current one's (Receives).
  std::uint64_t oldest = UINT64_MAX;
  for (const ChunkState& state : chunks_) oldest = std::min(oldest, state.iteration);
  if (oldest != UINT64_MAX) schedule_.ForgetBefore(oldest);
  AggregateAll();
}

void Shard::ExpectJoin(std::uint32_t rank) {
  AssertOnOwnThread();
  if (!job_->elastic || rank >= job_->world_size) return;
  ShardMember& member = members_[rank];
  // The slot's earlier worker was dropped (its connection closed then).
  member.joining = true;
  member.said_bye = false;
  member.seen = false;
  member.resume_at = ShardMember::kNoResume;
  for (ChunkState& state : chunks_) state.replay[rank] = ReplayState::kNone;
}

void Shard::Drop(std::uint32_t rank) {
  AssertOnOwnThread();
  if (!job_->elastic || rank >= job_->world_size) return;
  (void)ForgetWorker(rank);
  ShardMember& member = members_[rank];
  member.joining = false;
  member.excused_below = UINT64_MAX;
  AggregateAll();
}

}  // namespace phub::server
