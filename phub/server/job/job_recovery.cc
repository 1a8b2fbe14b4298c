// A job's part in recovery (docs/design.md "Recovery"): a member lost mid-job and its rejoin,
// and heartbeats both ways. Checkpoints are job_checkpoints.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/job.h"
#include "spdlog/spdlog.h"

namespace phub::server {
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
      std::any_of(ranks_.begin(), ranks_.end(), [](const Rank& r) { return r.left_cleanly; });
  if (stalled_) return;
  if (deadlines().rejoin_timeout_ms <= 0) return Stall(lost);
  // A job over several racks has no previous weights on its racks' PBoxes to resume from.
  if (spec_->relay) return Stall(absl::StrCat(lost, "; a job over several racks does not wait "
                                                    "for rejoins: restart it"));
  if (deadline_.kind == Deadline::kAttaching || anyone_left) {
    // Before everyone attached there is nothing to resume; after a Goodbye the job is ending.
    return Stall(absl::StrCat(lost, anyone_left ? " while the job was ending"
                                                : " before every worker had attached"));
  }
  RejoinPoint point;
  ++ranks_[rank].forgets;
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
  ranks_[rank].missing = true;
  ++missing_count_;
  ranks_[rank].resume_point = point.contributed;
  const std::string text = absl::StrCat(
      lost, "; the job waits up to ", deadlines().rejoin_timeout_ms,
      " ms (--rejoin-timeout-ms) for a worker of rank ", rank, " to say Hello again; it resumes at iteration ",
      point.contributed);
  spdlog::warn("{}: {}", log_name_, text);
  Notify(text);
  if (deadline_.kind == Deadline::kRejoin) return;  // an earlier loss's deadline holds
  ArmDeadline(Deadline::kRejoin, deadlines().rejoin_timeout_ms, [this] {
    std::string ranks;
    for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].missing) absl::StrAppend(&ranks, ranks.empty() ? "" : ", ", r);
    }
    Stall(absl::StrCat(missing_count_ > 0 ? absl::StrCat("rank(s) ", ranks, " did not rejoin")
                                          : "a rejoined worker did not attach",
                       " within ", deadlines().rejoin_timeout_ms,
                       " ms (--rejoin-timeout-ms)"));
    if (running_ && live_members_ == 0) End();
  });
}

bool Job::IsRejoin(const proto::Hello& hello) const {
  // An elastic job takes a worker back as a joiner (ElasticJoin).
  if (!running_ || stalled_ || elastic_.enabled || hello.rank() >= ranks_.size()) return false;
  // A member of the job says Hello again: its worker restarted (or gave phubd up while phubd
  // was paused) before phubd noticed the old connection is gone.
  const SessionPtr& member = members_[hello.rank()];
  return ranks_[hello.rank()].missing || (member && member->state == SessionState::kInJob &&
                                    deadlines().rejoin_timeout_ms > 0);
}

void Job::Rejoin(const SessionPtr& session, const proto::Hello& hello) {
  std::vector<bool> taken(world_size_, true);
  taken[hello.rank()] = false;
  std::optional<proto::Error> error =
      CheckHello(hello, host_.admission, &job_hello_, taken);
  if (error) {
    spdlog::warn("{}: refusing rank {}'s rejoin from {}: {}", log_name_, hello.rank(),
                 session->peer, error->message());
    if (ranks_[hello.rank()].missing && deadline_.kind == Deadline::kRejoin) {
      // Most likely a new job under the old one's name, not its worker: say what holds the
      // name, and until when, before what differs.
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(
          deadline_.timer.expiry() - std::chrono::steady_clock::now());
      return Refuse(session,
                    MakeError(error->code(),
                              absl::StrCat(log_name_, " is running and waits for rank ",
                                           hello.rank(), " to rejoin for ",
                                           std::max<std::int64_t>(0, left.count()),
                                           " s more (--rejoin-timeout-ms); this worker is not "
                                           "one of it: ",
                                           error->message()),
                              "give the new job another name (--job), or wait until the old "
                              "one ends"));
    }
    return Refuse(session, *error);
  }
  const std::uint32_t rank = hello.rank();
  if (const SessionPtr old = members_[rank]) {
    // Checked like any Hello first, so only a member of the job can replace a member.
    host_.sessions.Drop(old, absl::UnavailableError(absl::StrCat("rank ", rank, " said Hello again from ",
                                                  session->peer)));
    if (!ranks_[rank].missing) return Refuse(session, MakeError(
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
  ranks_[rank].missing = false;
  --missing_count_;
  ++live_members_;
  ++host_.counters.rejoins;
  const std::uint64_t at = ranks_[rank].resume_point;
  // The cores know before the Welcome goes out, so before the rejoiner can attach.
  for (auto& core : host_.cores) core->ExpectRejoin(spec_->session, rank, at);
  if (values_) values_->Rejoin(rank, at);  // it sends at + 1's values again, and on
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
    if (silent.count() > deadlines().liveness_timeout_ms) {
      spdlog::warn("{}: rank {} ({}): nothing heard for {} ms", log_name_, member->rank,
                   member->peer, silent.count());
      Refuse(member, MakeError(proto::Error::PEER_SILENT,
                               absl::StrCat("nothing heard from rank ", member->rank, " of ",
                                            log_name_, " for ", silent.count(),
                                            " ms (--liveness-timeout-ms ",
                                            deadlines().liveness_timeout_ms,
                                            "): stopped, hung, or its link is cut"),
                               "restart the worker with the same rank: it rejoins the job"));
      continue;
    }
    Send(member, heartbeat);
  }
}

}  // namespace phub::server
