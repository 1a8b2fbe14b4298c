// A job's part in recovery (docs/design.md "Recovery"): a member lost mid-job and its rejoin,
// heartbeats both ways, and checkpoints (gathered from the cores, written off this thread; on
// SIGTERM written before phubd stops). --resume is loaded by the control plane.
#include <algorithm>
#include <boost/asio/post.hpp>

#include "absl/strings/str_cat.h"
#include "phub/server/job/job.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/checkpoint/snapshot_buffers.h"
#include "spdlog/spdlog.h"

namespace phub::server {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

void Job::Notify(const std::string& text) {
  proto::ControlMessage message;
  message.mutable_notice()->set_text(text);
  for (auto& member : members_) {
    if (member) Send(member, message);
  }
}

// Called by Drop once `rank`'s session is gone from a running job without a Goodbye.
void Job::MemberLost(std::uint32_t rank, const std::string& why) {
  ++host_.counters.losses;
  const std::string lost = absl::StrCat("rank ", rank, " was lost (", why, ")");
  const bool anyone_left =
      std::find(left_cleanly_.begin(), left_cleanly_.end(), true) != left_cleanly_.end();
  if (stalled_) return;
  if (options().limits.rejoin_timeout_ms <= 0) return Stall(lost);
  // A job over several racks has no previous weights on its racks' PBoxes to resume from.
  if (spec_->relay) return Stall(absl::StrCat(lost, "; a job over several racks does not wait "
                                                    "for rejoins: restart it"));
  if (deadline_kind_ == Deadline::kAttaching || anyone_left) {
    // Before everyone attached there is nothing to resume; after a Goodbye the job is ending.
    return Stall(absl::StrCat(lost, anyone_left ? " while the job was ending"
                                                : " before every worker had attached"));
  }
  RejoinPoint point;
  ++forgets_[rank];
  for (auto& core : host_.cores) {
    const RejoinPoint p = core->ForgetWorker(spec_->session, rank);
    point.contributed = std::min(point.contributed, p.contributed);
    point.uninitialized += p.uninitialized;
  }
  if (point.uninitialized > 0) {
    return Stall(absl::StrCat(lost, " before the initial weights were all in (",
                              point.uninitialized, " chunks without them): nothing to resume"));
  }
  if (point.contributed == UINT64_MAX) point.contributed = 0;  // no chunks at all
  missing_[rank] = 1;
  ++missing_count_;
  resume_point_[rank] = point.contributed;
  const std::string text = absl::StrCat(
      lost, "; the job waits up to ", options().limits.rejoin_timeout_ms,
      " ms (--rejoin-timeout-ms) for a worker of rank ", rank, " to say Hello again; it resumes at iteration ",
      point.contributed);
  spdlog::warn("{}: {}", log_name_, text);
  Notify(text);
  if (deadline_kind_ == Deadline::kRejoin) return;  // an earlier loss's deadline holds
  ArmDeadline(Deadline::kRejoin, options().limits.rejoin_timeout_ms, [this] {
    std::string ranks;
    for (std::uint32_t r = 0; r < missing_.size(); ++r) {
      if (missing_[r]) absl::StrAppend(&ranks, ranks.empty() ? "" : ", ", r);
    }
    Stall(absl::StrCat(missing_count_ > 0 ? absl::StrCat("rank(s) ", ranks, " did not rejoin")
                                          : "a rejoined worker did not attach",
                       " within ", options().limits.rejoin_timeout_ms,
                       " ms (--rejoin-timeout-ms)"));
    if (running_ && live_members_ == 0) End();
  });
}

bool Job::IsRejoin(const proto::Hello& hello) const {
  if (!running_ || stalled_ || hello.rank() >= missing_.size()) return false;
  // A member of the job says Hello again: its worker restarted (or gave phubd up while phubd
  // was paused) before phubd noticed the old connection is gone.
  const SessionPtr& member = members_[hello.rank()];
  return missing_[hello.rank()] || (member && member->state == SessionState::kInJob &&
                                    options().limits.rejoin_timeout_ms > 0);
}

void Job::Rejoin(const SessionPtr& session, const proto::Hello& hello) {
  std::vector<bool> taken(world_size_, true);
  taken[hello.rank()] = false;
  std::optional<proto::Error> error =
      CheckHello(hello, options(), hello.job_token(), &job_hello_, taken);
  if (error) {
    spdlog::warn("{}: refusing rank {}'s rejoin from {}: {}", log_name_, hello.rank(),
                 session->peer, error->message());
    return Refuse(session, *error);
  }
  const std::uint32_t rank = hello.rank();
  if (const SessionPtr old = members_[rank]) {
    // Checked like any Hello first, so only a member of the job can replace a member.
    host_.sessions.Drop(old, absl::UnavailableError(absl::StrCat("rank ", rank, " said Hello again from ",
                                                  session->peer)));
    if (!missing_[rank]) return Refuse(session, MakeError(
        proto::Error::JOB_STALLED, "the job cannot take rank " + std::to_string(rank) + " back",
        "restart the job (all workers)"));
  }
  session->deadline.cancel();
  session->state = SessionState::kInJob;
  session->rank = rank;
  session->hello = hello;
  session->job = shared_from_this();
  session->last_heard = Clock::now();
  members_[rank] = session;
  missing_[rank] = 0;
  --missing_count_;
  ++live_members_;
  ++host_.counters.rejoins;
  const std::uint64_t at = resume_point_[rank];
  // The cores know before the Welcome goes out, so before the rejoiner can attach.
  for (auto& core : host_.cores) core->ExpectRejoin(spec_->session, rank, at);
  cores_attached_ = 0;
  SendWelcome(session, /*resumed=*/true, at);
  host_.sessions.ReadNext(session);
  const std::string text = absl::StrCat("rank ", rank, " rejoined from ", session->peer,
                                        "; it replays from iteration ", at);
  spdlog::info("{}: {}", log_name_, text);
  Notify(text);
}

void Job::CheckLiveness(Clock::time_point now) {
  proto::ControlMessage heartbeat;
  heartbeat.mutable_heartbeat();
  auto members = members_;
  for (auto& member : members) {
    if (!member || member->state != SessionState::kInJob) continue;
    const auto silent =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - member->last_heard);
    if (silent.count() > options().limits.liveness_timeout_ms) {
      spdlog::warn("{}: rank {} ({}): nothing heard for {} ms", log_name_, member->rank,
                   member->peer, silent.count());
      Refuse(member, MakeError(proto::Error::PEER_SILENT,
                               absl::StrCat("nothing heard from rank ", member->rank, " of ",
                                            log_name_, " for ", silent.count(),
                                            " ms (--liveness-timeout-ms ",
                                            options().limits.liveness_timeout_ms,
                                            "): stopped, hung, or its link is cut"),
                               "restart the worker with the same rank: it rejoins the job"));
      continue;
    }
    Send(member, heartbeat);
  }
}

std::shared_ptr<JobSnapshot> Job::SnapshotHeader() const {
  auto snapshot = std::make_shared<JobSnapshot>();
  snapshot->tensors = spec_->table.tensors();
  snapshot->chunk_bytes = spec_->table.chunk_bytes();
  snapshot->world_size = spec_->world_size;
  snapshot->optimizer = spec_->optimizer;
  snapshot->chunks.resize(spec_->table.chunks().size());
  return snapshot;
}

void Job::OnSnapshot(const ShardEvent& event) {
  if (!checkpoints_ || !spec_) return;
  if (event.iteration != gathering_iteration_) {
    if (gathering_iteration_ != 0) {
      spdlog::warn("{}: checkpoint of iteration {} abandoned: a core copied iteration {} first",
                   log_name_, gathering_iteration_, event.iteration);
    }
    // The chunks' buffers go back to the job's pool when the writer is done with them.
    gathering_ = SnapshotBuffers::Recycling(spec_->snapshot_buffers, std::move(*SnapshotHeader()));
    gathering_iteration_ = event.iteration;
    gathered_cores_ = 0;
    gathered_pause_ms_ = 0;
  }
  for (ChunkSnapshot& chunk : *event.chunks) gathering_->chunks[chunk.chunk] = std::move(chunk);
  // The cores copy in parallel: the longest any of them paused is the job's pause.
  gathered_pause_ms_ = std::max(gathered_pause_ms_, event.pause_ms);
  std::uint32_t cores_with_chunks = 0;
  for (auto& core : host_.cores) {
    if (!spec_->table.chunks_on_core(core->index()).empty()) ++cores_with_chunks;
  }
  if (++gathered_cores_ < cores_with_chunks) return;
  std::shared_ptr<const JobSnapshot> snapshot = std::move(gathering_);
  const std::uint64_t iteration = gathering_iteration_;
  const double pause_ms = gathered_pause_ms_;
  gathering_iteration_ = 0;
  const bool started = checkpoints_->Submit(
      // Posted to this thread only while the control plane lives (the writer's `post`).
      snapshot, [this, iteration, pause_ms](const StatusOr<std::string>& path, double write_ms) {
        if (!path.ok()) {
          spdlog::error("{}: checkpoint of iteration {} failed: {}; the previous one is kept",
                        log_name_, iteration, path.status().message());
          return;
        }
        ++host_.counters.checkpoints_written;
        spdlog::info("{}: checkpoint of iteration {} written to {} in {:.0f} ms; the cores "
                     "paused {:.2f} ms for it",
                     log_name_, iteration, *path, write_ms, pause_ms);
      });
  if (!started) {
    spdlog::warn("{}: checkpoint of iteration {} skipped: the previous one is still being "
                 "written (raise --checkpoint-every)", log_name_, iteration);
  }
}

void Job::CheckpointNow() {
  if (!checkpoints_ || !running_ || !spec_) return;
  std::shared_ptr<JobSnapshot> snapshot = SnapshotHeader();
  // The data plane stops first, so that no chunk moves on while the others are copied.
  for (auto& core : host_.cores) {
    for (ChunkSnapshot& chunk : core->StopAndSnapshot(spec_->session)) {
      snapshot->chunks[chunk.chunk] = std::move(chunk);
    }
  }
  std::uint64_t low = UINT64_MAX;
  for (const ChunkSnapshot& chunk : snapshot->chunks) low = std::min(low, chunk.iteration);
  if (snapshot->chunks.empty() || low == 0) {
    spdlog::info("{}: no checkpoint on stop: the job has not completed an iteration", log_name_);
    return;
  }
  StatusOr<std::string> path = checkpoints_->WriteNow(*snapshot);
  if (!path.ok()) {
    spdlog::error("{}: checkpoint on stop failed: {}", log_name_, path.status().message());
    return;
  }
  ++host_.counters.checkpoints_written;
  spdlog::info("{}: checkpoint on stop written to {} (iteration {})", log_name_, *path, low);
}

}  // namespace phub::server
