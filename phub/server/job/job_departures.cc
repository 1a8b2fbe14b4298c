// How members leave an elastic job (docs/design.md "Elastic jobs"), on the control plane's
// thread, and what the job does below its minimum. A member lost without Goodbye is dropped at
// once (no chunk waits for it; what it pushed counts) and a change then tells the others; one
// that leaves with Goodbye is excused at its BYE the same way; one that asks to leave
// (LeaveRequest) is removed by a change (job_membership.cc) and pushes up to the iteration
// before it.
#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/job.h"
#include "phub/server/job/rank_list.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using rank_list::Has;
using rank_list::Remove;

void Job::CheckMinimum() {
  if (!running_ || stalled_) return;
  if (!elastic_.frozen) {
    if (deadline_.kind == Deadline::kRejoin) CancelDeadline();
    return;
  }
  if (deadline_.kind == Deadline::kRejoin) return;
  const std::string text = absl::StrCat(
      log_name_, " has fewer members than its minimum (", elastic_.min,
      "): it waits up to ", deadlines().rejoin_timeout_ms,
      " ms (--rejoin-timeout-ms) for workers to join");
  spdlog::warn("{}", text);
  Notify(text);
  ArmDeadline(Deadline::kRejoin, std::max(0, deadlines().rejoin_timeout_ms), [this] {
    Stall(absl::StrCat("fewer than ", elastic_.min, " members (the job's minimum) for ",
                       deadlines().rejoin_timeout_ms, " ms (--rejoin-timeout-ms)"));
    if (running_ && live_members_ == 0) End();
  });
}

std::uint64_t Job::FreezeCores() {
  std::uint64_t latest = 0;
  for (auto& core : host_.cores) {
    core->RunOnShard(spec_->session,
                     [&latest](Shard& shard) { latest = std::max(latest, shard.Freeze()); });
  }
  return latest;
}

void Job::DropOnCores(std::uint32_t rank) {
  ++ranks_[rank].forgets;
  for (auto& core : host_.cores) {
    core->RunOnShard(spec_->session, [rank](Shard& shard) { shard.Drop(rank); });
  }
}

void Job::ElasticLoss(std::uint32_t rank, const std::string& why) {
  ++host_.counters.losses;
  // A loss that leaves fewer than the minimum: the cores stop first, so that no chunk sums the
  // next iteration over the rest between the drop and the change that holds the job.
  // (Not in a job that is ending: its others finish their last iteration without it.)
  if (Has(elastic_.members, rank) && elastic_.members.size() <= elastic_.min &&
      !elastic_.ending && !stalled_ && running_) {
    FreezeCores();
  }
  DropOnCores(rank);
  ValuesMembersChanged(rank);
  const bool was_member = Has(elastic_.members, rank);
  Remove(elastic_.members, rank);
  Remove(elastic_.joiners, rank);
  Remove(elastic_.leavers, rank);
  const std::string text = absl::StrCat(
      "rank ", rank, " was lost (", why, ")",
      was_member ? absl::StrCat("; the others go on without it, no wait (",
                                elastic_.members.size(),
                                elastic_.members.size() == 1 ? " member)" : " members)")
                 : " before it had joined");
  spdlog::warn("{}: {}", log_name_, text);
  Notify(text);
  if (elastic_.changing && elastic_.awaiting[rank]) {
    elastic_.awaiting[rank] = false;
    if (std::none_of(elastic_.awaiting.begin(), elastic_.awaiting.end(),
                     [](bool b) { return b; })) {
      FinishChange();
    }
  }
  if (elastic_.joiners.empty() || (!elastic_.joiners_attached && JoinersAttached())) {
    elastic_.joiners_attached = true;
  }
  BeginChange();
}

void Job::ElasticGoodbye(std::uint32_t rank) {
  // It left through a change (LeaveRequest) if neither the members nor the joiners (of the
  // change in progress too) have it.
  const bool announced = !Has(elastic_.members, rank) && !Has(elastic_.joiners, rank) &&
                         !(elastic_.changing && Has(elastic_.joining, rank));
  Remove(elastic_.members, rank);
  Remove(elastic_.joiners, rank);
  Remove(elastic_.leavers, rank);
  ValuesMembersChanged(rank);
  if (elastic_.joiners.empty()) elastic_.joiners_attached = true;
  if (elastic_.changing && elastic_.awaiting[rank]) {
    elastic_.awaiting[rank] = false;
    if (std::none_of(elastic_.awaiting.begin(), elastic_.awaiting.end(),
                     [](bool b) { return b; })) {
      FinishChange();
    }
  }
  if (announced) return;
  // Its BYE excuses it on every core (the copies it pushed count).
  if (elastic_.members.size() >= elastic_.min) return BeginChange();
  // Fewer than the minimum left by Goodbye: the job is ending, the others must follow (a loss
  // then is no pause to hold for: ElasticLoss drops it, MemberGone ends the job when none is
  // left).
  elastic_.ending = true;
  ArmLeaveDeadline(rank);
}

void Job::OnLeaveRequest(const SessionPtr& session) {
  if (!elastic_.enabled) {
    return Refuse(session, MakeError(proto::Error::BAD_REQUEST,
                                     absl::StrCat("LeaveRequest from rank ", session->rank,
                                                  " in ", log_name_, ", which is not elastic"),
                                     "end the worker with Goodbye (PsClient::Close)"));
  }
  const auto rank = static_cast<std::uint32_t>(session->rank);
  if (Has(elastic_.leavers, rank)) return;
  if (!Has(elastic_.members, rank)) {
    // A joiner (its change may be on its way): it leaves by the change after the one that
    // makes it a member, so that it goes as every member does, after a whole iteration.
    if (!Has(elastic_.joiners, rank)) return;
    elastic_.leavers.push_back(rank);
    spdlog::info("{}: rank {}, joining, asks to leave: it leaves at the boundary after its first "
                 "iteration", log_name_, rank);
    return;
  }
  elastic_.leavers.push_back(rank);
  spdlog::info("{}: rank {} asks to leave at the next iteration boundary", log_name_, rank);
  BeginChange();
}

}  // namespace phub::server
