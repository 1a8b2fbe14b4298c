// StepValuesLedger (step_values_ledger.h): the checks of a StepValues message and the job's
// agreement on each iteration's values.
#include "phub/server/job/step_values_ledger.h"

#include "absl/strings/str_cat.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::server {

using Kind = StepValuesLedger::Outcome::Kind;

StepValuesLedger::StepValuesLedger(kernels::OptimizerKind kind, std::uint32_t world_size,
                                   std::uint64_t start,
                                   std::optional<kernels::StepValues> start_values)
    : kind_(kind), world_size_(world_size), next_(world_size, start + 1), last_agreed_(start) {
  if (start_values) agreed_[start] = *start_values;
}

std::string StepValuesLedger::Describe(const kernels::StepValues& values) const {
  return kernels::Describe(kind_, values);
}

StepValuesLedger::Outcome StepValuesLedger::Give(std::uint32_t rank, std::uint64_t iteration,
                                                 const kernels::StepValues& values) {
  const auto refuse = [&](std::string why) {
    return Outcome{.kind = Kind::kRefused, .iteration = iteration, .why = std::move(why)};
  };
  if (Status valid = kernels::ValidateStepValues(kind_, values); !valid.ok()) {
    return refuse(absl::StrCat("rank ", rank, "'s hyper-parameters for iteration ", iteration,
                               " are invalid: ", valid.message()));
  }
  if (iteration != next_[rank]) {
    return refuse(absl::StrCat("rank ", rank, " sent hyper-parameters for iteration ", iteration,
                               "; its next are iteration ", next_[rank],
                               "'s (one message per iteration, in order)"));
  }
  if (iteration > last_agreed_ + kAhead) {
    return refuse(absl::StrCat("rank ", rank, " sent hyper-parameters for iteration ", iteration,
                               ", more than ", kAhead, " past the job's iteration ", last_agreed_,
                               " (a worker sends an iteration's values just before pushing it)"));
  }
  ++next_[rank];
  if (iteration <= last_agreed_) {
    // A rejoined rank replaying an iteration the job has agreed on: its values must be the same.
    if (auto it = agreed_.find(iteration); it != agreed_.end() && !(it->second == values)) {
      return Outcome{.kind = Kind::kDisagreed,
                     .iteration = iteration,
                     .why = absl::StrCat("rank ", rank, " gives iteration ", iteration, " ",
                                         Describe(values), "; the job stepped it with ",
                                         Describe(it->second))};
    }
    return Outcome{.kind = Kind::kWaiting, .iteration = iteration, .values = values};
  }
  Pending& pending = pending_[iteration];
  if (pending.by_rank.empty()) pending.by_rank.resize(world_size_);
  for (std::uint32_t other = 0; other < world_size_; ++other) {
    const auto& theirs = pending.by_rank[other];
    if (theirs && !(*theirs == values)) {
      return Outcome{.kind = Kind::kDisagreed,
                     .iteration = iteration,
                     .why = absl::StrCat("the ranks disagree on iteration ", iteration,
                                         "'s hyper-parameters: rank ", rank, " gives ",
                                         Describe(values), ", rank ", other, " ",
                                         Describe(*theirs))};
    }
  }
  pending.by_rank[rank] = values;
  if (++pending.given < world_size_) {
    return Outcome{.kind = Kind::kWaiting, .iteration = iteration, .values = values};
  }
  // A rank gives t + 1 only after t, so iterations are agreed in order.
  pending_.erase(iteration);
  last_agreed_ = iteration;
  agreed_[iteration] = values;
  while (agreed_.size() > kKept) agreed_.erase(agreed_.begin());
  return Outcome{.kind = Kind::kAgreed, .iteration = iteration, .values = values};
}

void StepValuesLedger::Rejoin(std::uint32_t rank, std::uint64_t resume_point) {
  next_[rank] = resume_point + 1;
  for (auto& [iteration, pending] : pending_) {
    if (iteration > resume_point && pending.by_rank[rank]) {
      pending.by_rank[rank].reset();
      --pending.given;
    }
  }
}

std::optional<kernels::StepValues> StepValuesLedger::Agreed(std::uint64_t iteration) const {
  if (auto it = agreed_.find(iteration); it != agreed_.end()) return it->second;
  return std::nullopt;
}

std::string StepValuesLedger::Missing(std::uint64_t iteration) const {
  if (iteration <= last_agreed_) return "";
  auto it = pending_.find(iteration);
  std::string ranks;
  for (std::uint32_t r = 0; r < world_size_; ++r) {
    if (it != pending_.end() && it->second.by_rank[r]) continue;
    absl::StrAppend(&ranks, ranks.empty() ? "" : ", ", r);
    if (ranks.size() > 200) return absl::StrCat(ranks, ", ...");
  }
  return ranks;
}

}  // namespace phub::server
