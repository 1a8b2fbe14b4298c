// A job's elastic membership (docs/design.md "Elastic jobs"), on the control plane's thread:
// workers join a running job and leave it at iteration boundaries, and the others go on.
//
// One announcement, one truth: phubd alone decides who the members of each iteration are
// (MemberSchedule), one change at a time. A change freezes every core (no chunk completes an
// iteration past the latest any chunk has completed, M), takes effect at M + 2 (no worker has
// begun it: nobody has the weights of M + 1), is sent to every member and joiner, and is
// applied on the cores once each has acknowledged it, so every worker knows an iteration's
// members before it computes that iteration and every chunk sums that iteration over them.
// How members leave (lost, Goodbye, LeaveRequest) and the minimum: job_departures.cc.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/job/job.h"
#include "phub/server/job/rank_list.h"
#include "spdlog/spdlog.h"

namespace phub::server {
using rank_list::Has;
using rank_list::Remove;
using rank_list::RanksText;

void Job::ConfigureElastic(const proto::Hello& hello) {
  elastic_.enabled = hello.min_workers() > 0;
  if (!elastic_.enabled) return;
  elastic_.min = hello.min_workers();
  elastic_.start = hello.start_workers() > 0 ? hello.start_workers() : hello.min_workers();
}

bool Job::ReadyToStart() const {
  if (!elastic_.enabled) return joined_ == world_size_;
  for (std::uint32_t r = 0; r < elastic_.start; ++r) {
    if (!members_[r]) return false;
  }
  return true;
}

void Job::DescribeMembership(proto::Membership& membership) const {
  membership.set_from_iteration(elastic_.schedule.LatestFrom());
  for (std::uint32_t rank : elastic_.schedule.Latest().ranks) membership.add_ranks(rank);
  membership.set_member_iterations_before(elastic_.schedule.Latest().member_iterations_before);
}

void Job::ElasticJoin(const SessionPtr& session, const proto::Hello& hello) {
  // Its own rank if that slot is free, else the lowest free one.
  // A slot whose joiner is in the change in progress is not free even if that joiner was lost:
  // the change still makes the slot a member from its iteration (the next change drops it).
  const auto free = [&](std::uint32_t r) {
    return r < world_size_ && !members_[r] && !(elastic_.changing && Has(elastic_.joining, r));
  };
  if (elastic_.ending) {
    return Refuse(session, MakeError(proto::Error::BAD_REQUEST,
                                     absl::StrCat(log_name_, " is ending: a member said Goodbye "
                                                  "with fewer than its minimum left"),
                                     "start the job again (every worker)"));
  }
  std::optional<std::uint32_t> slot;
  if (free(hello.rank())) slot = hello.rank();
  for (std::uint32_t r = 0; !slot && r < world_size_; ++r) {
    if (free(r)) slot = r;
  }
  if (!slot) {
    return Refuse(session,
                  MakeError(proto::Error::BAD_REQUEST,
                            absl::StrCat(log_name_, " has its most workers already (",
                                         world_size_, ", the Hello's world size)"),
                            "start this worker once a member has left, or give the job a "
                            "larger --max-workers when it is next started"));
  }
  proto::Hello as_slot = hello;
  as_slot.set_rank(*slot);
  const std::vector<bool> taken(world_size_, false);
  if (std::optional<proto::Error> error =
          CheckHello(as_slot, host_.admission, &job_hello_, taken)) {
    spdlog::warn("{}: refusing a worker from {} that would join: {}", log_name_, session->peer,
                 error->message());
    return Refuse(session, *error);
  }
  const std::uint32_t rank = *slot;
  session->deadline.cancel();
  session->state = SessionState::kInJob;
  session->rank = rank;
  session->hello = as_slot;
  session->job = shared_from_this();
  session->last_heard = std::chrono::steady_clock::now();
  members_[rank] = session;
  const std::uint64_t forgets = ranks_[rank].forgets;
  ranks_[rank] = Rank{};
  ranks_[rank].forgets = forgets;
  ++live_members_;
  ++host_.counters.rejoins;
  elastic_.joiners.push_back(rank);
  elastic_.joiners_attached = false;
  cores_attached_ = 0;
  // The cores know before the Welcome goes out, so before the joiner can attach. Whatever the
  // slot's earlier worker left there (a connection after its BYE) goes first.
  DropOnCores(rank);
  for (auto& core : host_.cores) {
    core->RunOnShard(spec_->session, [rank](Shard& shard) { shard.ExpectJoin(rank); });
  }
  SendWelcome(session, /*resumed=*/true, 0);
  host_.sessions.ReadNext(session);
  // A joiner that never attaches must not hold its slot (nor the next change) for good.
  const int attach_ms = deadlines().attach_timeout_ms;
  session->deadline.expires_after(std::chrono::milliseconds(attach_ms));
  session->deadline.async_wait([this, rank, attach_ms, weak = std::weak_ptr<Session>(session),
                                alive = alive_](const boost::system::error_code& ec) {
    SessionPtr joiner = weak.lock();
    if (!*alive || ec || !joiner || members_[rank] != joiner || !Has(elastic_.joiners, rank) ||
        Has(elastic_.joining, rank)) {
      return;
    }
    Refuse(joiner, MakeError(proto::Error::TIMEOUT,
                             absl::StrCat("rank ", rank, " did not attach to every core of ",
                                          log_name_, " within ", attach_ms,
                                          " ms of its Welcome (--attach-timeout-ms)"),
                             "check that the worker reaches phubd's data ports; then start it "
                             "again"));
  });
  spdlog::info("{}: a worker from {} joins as rank {}{}; it becomes a member at the next "
               "iteration boundary once attached",
               log_name_, session->peer, rank,
               rank == hello.rank() ? "" : absl::StrCat(" (it asked for ", hello.rank(), ")"));
}

bool Job::JoinersAttached() {
  bool all = true;
  for (auto& core : host_.cores) {
    core->RunOnShard(spec_->session, [&all](Shard& shard) { all = all && shard.EveryoneAttached(); });
  }
  return all;
}

void Job::BeginChange() {
  if (!elastic_.enabled || !running_ || stalled_ || ended_ || elastic_.ending) return;
  if (elastic_.changing) {
    elastic_.again = true;
    return;
  }
  std::vector<std::uint32_t> next;
  for (std::uint32_t rank : elastic_.members) {
    if (!Has(elastic_.leavers, rank)) next.push_back(rank);
  }
  std::vector<std::uint32_t> joining;
  if (elastic_.joiners_attached) joining = elastic_.joiners;
  next.insert(next.end(), joining.begin(), joining.end());
  std::sort(next.begin(), next.end());
  // Every member leaving (a whole job preempted): they are told so, all after the same
  // iteration. Every member lost: a change to none holds the job (below its minimum) for
  // joiners, which start from where it was.
  if (joining.empty() && next == elastic_.schedule.Latest().ranks) return;

  // Nobody has begun latest + 2: its weights of latest + 1 do not exist yet, and no chunk
  // completes latest + 1 until the change is applied.
  const std::uint64_t latest = FreezeCores();
  std::uint64_t from = latest + 2;
  // At the latest change's own first iteration this change replaces it (two joins close
  // together become one change), unless it would take back a join that change made: the
  // joiner would lose its first iteration and never get weights (one asking to leave at once).
  // Then it comes an iteration later; nobody begins that before this change is applied either.
  if (from <= elastic_.schedule.LatestFrom() && elastic_.schedule.LatestFrom() > 0) {
    const std::uint64_t latest_from = elastic_.schedule.LatestFrom();
    const MemberSchedule::Entry* before = elastic_.schedule.At(latest_from - 1);
    for (std::uint32_t rank : elastic_.schedule.Latest().ranks) {
      const bool joined_there =
          before == nullptr || !std::binary_search(before->ranks.begin(), before->ranks.end(), rank);
      if (joined_there && !Has(next, rank)) from = latest_from + 1;
    }
  }
  elastic_.frozen_since = std::chrono::steady_clock::now();
  elastic_.schedule.Change(from, next);
  elastic_.schedule.ForgetBefore(from - 1);  // bounded: what this change and the hold read
  elastic_.changing = true;
  elastic_.from = from;
  elastic_.next = next;
  elastic_.joining = joining;
  elastic_.awaiting.assign(world_size_, false);
  proto::ControlMessage message;
  DescribeMembership(*message.mutable_membership());
  std::uint32_t waiting = 0;
  for (std::uint32_t rank = 0; rank < world_size_; ++rank) {
    const SessionPtr& member = members_[rank];
    if (!member || member->state != SessionState::kInJob) continue;
    if (!Has(elastic_.members, rank) && !Has(joining, rank)) continue;
    Send(member, message);
    elastic_.awaiting[rank] = true;
    ++waiting;
  }
  spdlog::info("{}: members from iteration {}: {} (ranks {}){}{}", log_name_, from, next.size(),
               RanksText(next),
               joining.empty() ? "" : absl::StrCat("; joining: ", RanksText(joining)),
               elastic_.leavers.empty() ? ""
                                        : absl::StrCat("; leaving: ", RanksText(elastic_.leavers)));
  if (waiting == 0) return FinishChange();
  // A member that does not answer is treated as lost: the job must not wait on it for good.
  const int timeout_ms = deadlines().liveness_timeout_ms > 0 ? deadlines().liveness_timeout_ms
                                                             : 10000;
  elastic_timer_.expires_after(std::chrono::milliseconds(timeout_ms));
  const std::uint64_t generation = ++elastic_.generation;
  elastic_timer_.async_wait([this, from, timeout_ms, generation,
                             alive = alive_](const boost::system::error_code& ec) {
    if (!*alive || ec || !elastic_.changing || elastic_.generation != generation) return;
    // Who is silent now: refusing one may finish this change and begin another (ElasticLoss),
    // whose members must not be taken for this one's.
    std::vector<SessionPtr> silent;
    for (std::uint32_t rank = 0; rank < world_size_; ++rank) {
      if (elastic_.awaiting[rank] && members_[rank]) silent.push_back(members_[rank]);
    }
    for (const SessionPtr& member : silent) {
      const auto rank = static_cast<std::uint32_t>(member->rank);
      if (members_[rank] != member) continue;
      Refuse(member,
             MakeError(proto::Error::PEER_SILENT,
                       absl::StrCat("rank ", rank, " did not acknowledge the membership of ",
                                    log_name_, " from iteration ", from, " within ", timeout_ms,
                                    " ms (--liveness-timeout-ms)"),
                       "restart the worker: it joins the job again"));
    }
    if (elastic_.changing && elastic_.generation == generation) FinishChange();
  });
}

void Job::OnMembershipAck(const SessionPtr& session, const proto::MembershipAck& ack) {
  if (!elastic_.enabled) {
    return Refuse(session, MakeError(proto::Error::BAD_REQUEST,
                                     absl::StrCat("MembershipAck from rank ", session->rank,
                                                  " in ", log_name_, ", which is not elastic"),
                                     "connect with PsClient"));
  }
  // An answer to a change since replaced, or a late one: nothing to do.
  if (!elastic_.changing || ack.from_iteration() != elastic_.from) return;
  const auto rank = static_cast<std::uint32_t>(session->rank);
  if (!elastic_.awaiting[rank]) return;
  elastic_.awaiting[rank] = false;
  if (std::none_of(elastic_.awaiting.begin(), elastic_.awaiting.end(), [](bool b) { return b; })) {
    FinishChange();
  }
}

void Job::FinishChange() {
  elastic_timer_.cancel();
  elastic_.changing = false;
  // A member lost meanwhile is in `next` (the cores excuse it); the next change removes it.
  // Below the minimum from `from` on, the job holds: nothing from `from` on is summed, and
  // `from` - 1 only if at least the minimum of its members are still there (members that leave
  // after it finish it; a loss that leaves it short holds it too, until workers join). A job
  // every member leaves finishes what is in flight instead: it is ending, nobody would join.
  const bool below = elastic_.next.size() < elastic_.min;
  std::uint64_t hold_at = UINT64_MAX;
  if (elastic_.next.empty()) {
    hold_at = elastic_.from - 1;
  } else if (below) {
    std::uint32_t present = 0;
    if (const MemberSchedule::Entry* last = elastic_.schedule.At(elastic_.from - 1)) {
      for (std::uint32_t rank : last->ranks) present += members_[rank] ? 1 : 0;
    }
    hold_at = present >= elastic_.min ? elastic_.from - 1 : elastic_.from - 2;
  }
  for (auto& core : host_.cores) {
    core->RunOnShard(spec_->session, [this, hold_at](Shard& shard) {
      shard.ChangeMembership(elastic_.from, elastic_.next, elastic_.joining, hold_at);
    });
  }
  elastic_.members.clear();
  for (std::uint32_t rank : elastic_.next) {
    if (members_[rank]) elastic_.members.push_back(rank);
  }
  for (std::uint32_t rank : elastic_.joining) Remove(elastic_.joiners, rank);
  if (values_) {
    // A joiner gives values from its first iteration on; a schedule's change may settle one.
    for (std::uint32_t rank : elastic_.joining) {
      if (members_[rank]) values_->Enter(rank, elastic_.from);
    }
    ValuesMembersChanged(std::nullopt);
  }
  std::vector<std::uint32_t> leaving;
  for (std::uint32_t rank : elastic_.leavers) {
    if (!Has(elastic_.next, rank)) leaving.push_back(rank);
  }
  for (std::uint32_t rank : leaving) Remove(elastic_.leavers, rank);
  // A joiner that asked to leave before it was a member: now it is, the next change lets it go.
  for (std::uint32_t rank : elastic_.leavers) {
    if (Has(elastic_.joining, rank)) elastic_.again = true;
  }
  const std::string text = absl::StrCat(
      "from iteration ", elastic_.from, " the job has ", elastic_.next.size(), " members (ranks ",
      RanksText(elastic_.next), ")",
      elastic_.joining.empty() ? "" : absl::StrCat("; joined: ", RanksText(elastic_.joining)),
      leaving.empty() ? "" : absl::StrCat("; leaving after iteration ", elastic_.from - 1, ": ",
                                          RanksText(leaving)));
  // What the change cost the others: how long no chunk could complete an iteration.
  const double frozen_ms = std::chrono::duration<double, std::milli>(
                               std::chrono::steady_clock::now() - elastic_.frozen_since)
                               .count();
  spdlog::info("{}: {} (the cores were held {:.2f} ms for it)", log_name_, text, frozen_ms);
  Notify(text);
  elastic_.joining.clear();  // applied: no joiner is in a change in progress now
  elastic_.frozen = below;
  CheckMinimum();
  if (elastic_.again) {
    elastic_.again = false;
    BeginChange();
  }
}

}  // namespace phub::server
