// ShardMember: what one shard knows of one worker of its job (Shard keeps one per rank, for
// the job's life: a rank that leaves and rejoins keeps its entry). Touched on the shard's
// thread only, like the rest of the shard.
#pragma once

#include <cstdint>
#include <memory>

#include "phub/transport/connection.h"
#include "phub/transport/send_scheduler.h"

namespace phub::server {

// What ResolveSlot decided about a worker's push, for OnReceived (between the two, other
// connections' messages may complete the chunk, so the decision is kept, not taken again).
enum class PushKind : std::uint8_t {
  kCount,          // a new copy: it counts towards the chunk's iteration
  kReplayDone,     // a replay of an iteration the chunk completed: answered with its weights
  kReplayCounted,  // a replay of a copy the chunk holds already: dropped
};

struct ShardMember {
  static constexpr std::uint64_t kNoResume = UINT64_MAX;

  // Its data connection to this core. Set by Attach; cleared only by ForgetWorker (a
  // connection that closes stays here, so that OnClosed reports its loss once and a second
  // ATTACH of the rank is refused until the control plane forgets it).
  std::shared_ptr<transport::Connection> connection;
  // Orders the WEIGHTS the worker gets, first layers first (JobSpec::send_window_bytes). Set
  // and cleared with `connection`.
  std::shared_ptr<transport::SendScheduler> sender;
  // Its BYE arrived: nothing more is taken from it, and a chunk still missing its copy can
  // never complete (Shard::CheckCompletable). Never cleared.
  bool said_bye = false;
  // It attached once in this job: attaching again needs a rejoin (resume_at). Never cleared.
  bool seen = false;
  // How many times ForgetWorker forgot it: the epoch of its connection's loss (ShardEvent).
  std::uint64_t forgotten = 0;
  // Recovery (shard_recovery.cc). resume_at: the iteration whose weights it is sent once it
  // attaches, or kNoResume. Set by ExpectRejoin (or, for every rank, by a job resumed from a
  // checkpoint); cleared when the weights go (SendResumeWeights) or by ForgetWorker.
  std::uint64_t resume_at = kNoResume;
  // The one iteration whose pushes may be replays (resume_at + 1); set with resume_at.
  std::uint64_t replay_through = 0;
  // The iteration of its first weights (0, or where it resumed): with JobSpec::wire.weights
  // they go whole (as INIT), every later one as a change of them. Set with resume_at.
  std::uint64_t start_at = 0;
  // ResolveSlot's decision about its push in flight, for OnReceived; set on every PUSH.
  PushKind push_kind = PushKind::kCount;
  // Elastic jobs (shard_membership.cc). joining: admitted by the control plane, may attach,
  // is sent nothing until a membership change makes it a member. excused_below: iterations
  // below this need not hold its copy (it was dropped: UINT64_MAX while it is gone; the
  // iteration it joined at again once it comes back).
  bool joining = false;
  std::uint64_t excused_below = 0;
};

}  // namespace phub::server
