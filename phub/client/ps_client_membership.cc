// PsClient in an elastic job (docs/design.md "Elastic jobs"): the Memberships phubd announces,
// checked and acknowledged on the loop thread, each iteration's members for the caller's data
// loader, and a request to leave.
#include "absl/strings/str_cat.h"
#include "phub/client/ps_client_impl.h"
#include "spdlog/spdlog.h"

namespace phub::client {

void PsClient::Impl::KeepMembership(const proto::Membership& membership) {
  schedule_.Set(membership.from_iteration(),
                std::vector<std::uint32_t>(membership.ranks().begin(), membership.ranks().end()),
                membership.member_iterations_before());
}

void PsClient::Impl::OnMembership(const proto::Membership& membership) {
  // The one check of a Membership: phubd's word decides which data this worker trains on.
  const auto refuse = [&](const std::string& why) {
    RecordError(absl::InternalError(absl::StrCat(
        "phubd sent a Membership (from iteration ", membership.from_iteration(), ") that ", why,
        ": a phubd of another PHub release, or a bug; restart the worker")));
  };
  if (!elastic()) return refuse("this worker's fixed job cannot have");
  if (membership.from_iteration() == 0) return refuse("starts at iteration 0");
  // No ranks: every member leaves after from_iteration - 1 (a whole job asked to leave).
  if (static_cast<std::uint32_t>(membership.ranks_size()) > membership_.world_size) {
    return refuse(absl::StrCat("lists ", membership.ranks_size(), " members (the job has at most ",
                               membership_.world_size, ")"));
  }
  for (int i = 0; i < membership.ranks_size(); ++i) {
    if (membership.ranks(i) >= membership_.world_size ||
        (i > 0 && membership.ranks(i) <= membership.ranks(i - 1))) {
      return refuse("lists ranks out of range or not ascending");
    }
  }
  const std::uint64_t from = membership.from_iteration();
  {
    std::lock_guard lock(mu_);
    if (joining_) {
      bool mine = false;
      for (std::uint32_t r : membership.ranks()) mine = mine || r == membership_.rank;
      if (!mine) return refuse("does not make this joining worker a member");
      // Its first weights are of from - 1: they land next (phubd sends them once every member
      // has acknowledged this).
      joining_ = false;
      resume_iteration_ = from - 1;
      values_iteration_ = pushed_iteration_ = from - 1;
      for (TensorState& state : tensors_) {
        state.iteration = state.expect_iteration = from - 1;
      }
      landed_.assign(landed_.size(), from - 1);
      weights_seen_ = 0;
      // Its connections were made before it knew its first iteration (transport::Connection):
      // its first weights (whole with compact weights) are of from - 1, its first push of from.
      for (auto& connection : connections_) {
        connection->ExpectIteration(WeightsOp(from - 1), membership_.rank, from - 1);
        if (WeightsOp(from - 1) != Op::kWeights) {
          connection->ExpectIteration(Op::kWeights, membership_.rank, from);
        }
        connection->ExpectIteration(Op::kPush, membership_.rank, from);
      }
    } else {
      // phubd announces a change before any worker can begin its first iteration.
      if (from <= pushed_iteration_) {
        return refuse(absl::StrCat("this worker has begun already (it pushed iteration ",
                                   pushed_iteration_, ")"));
      }
      if (!schedule_.empty() && from < schedule_.LatestFrom()) {
        return refuse(absl::StrCat("comes before the one of iteration ", schedule_.LatestFrom()));
      }
    }
    KeepMembership(membership);
  }
  spdlog::info("rank {}: from iteration {} the job has {} members", membership_.rank, from,
               membership.ranks_size());
  proto::ControlMessage ack;
  ack.mutable_membership_ack()->set_from_iteration(from);
  SendControl(ack);
}

IterationMembers PsClient::Impl::MembersOf(std::uint64_t iteration) const {
  if (!elastic()) {
    return {.member = true,
            .index = membership_.rank,
            .world = membership_.world_size,
            .member_iterations_before =
                (iteration > 0 ? iteration - 1 : 0) * std::uint64_t{membership_.world_size}};
  }
  std::unique_lock lock(mu_);
  // A change from `iteration` on is announced, and acknowledged here, before any chunk
  // completes iteration - 1: once weights of iteration - 1 have landed, it is known. (A caller
  // that has not pushed iteration - 1 gets what is known now: nothing would come.)
  if (iteration >= 2 && pushed_iteration_ >= iteration - 1) {
    cv_.wait(lock, [&] {
      return weights_seen_ >= iteration - 1 || resume_iteration_ >= iteration - 1 ||
             !error_.status().ok();
    });
  }
  return schedule_.Of(iteration, membership_.rank);
}

Status PsClient::Impl::RequestLeave() {
  if (!elastic()) {
    return absl::FailedPreconditionError(
        "RequestLeave in a fixed job: only an elastic job (min_workers) goes on without a member; "
        "Close() ends this worker's part");
  }
  {
    std::lock_guard lock(mu_);
    if (!error_.status().ok()) return error_.status();
  }
  proto::ControlMessage message;
  message.mutable_leave_request();
  loop_.Post([this, message = std::move(message)] { SendControl(message); });
  return absl::OkStatus();
}

}  // namespace phub::client
