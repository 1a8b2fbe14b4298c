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
    : kind_(kind),
      world_size_(world_size),
      next_(world_size, start + 1),
      in_(world_size, true),
      first_(world_size, 0),
      last_agreed_(start) {
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
  if (!in_[rank]) {
    return refuse(absl::StrCat("rank ", rank, " sent hyper-parameters for iteration ", iteration,
                               " before it is a member of the job (a joiner sends its first "
                               "iteration's after Init, once its first weights came)"));
  }
  if (member_of_ && !member_of_(rank, iteration)) {
    return refuse(absl::StrCat("rank ", rank, " sent hyper-parameters for iteration ", iteration,
                               ", of which it is not a member (a worker that left sends none "
                               "past its last iteration)"));
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
  // Iterations are agreed in order; this one may complete an earlier one too (a member of t + 1
  // only may give it while t waits for another): those wait in unreported_ for Settle.
  Outcome result{.kind = Kind::kWaiting, .iteration = iteration, .values = values};
  while (std::optional<Outcome> agreed = AgreeNext()) {
    if (agreed->iteration == iteration) {
      result = *agreed;
    } else {
      unreported_.push_back(*agreed);
    }
  }
  return result;
}

bool StepValuesLedger::Awaits(std::uint32_t rank, std::uint64_t iteration) const {
  return in_[rank] && iteration >= first_[rank] && (!member_of_ || member_of_(rank, iteration));
}

std::optional<StepValuesLedger::Outcome> StepValuesLedger::AgreeNext() {
  std::uint64_t iteration = last_agreed_ + 1;
  auto it = pending_.find(iteration);
  while (it == pending_.end()) {
    // An iteration nobody will push (an elastic job whose members were all lost) before a
    // joiner's first: it has no values, and the cores pass it without a step.
    bool before_a_joiner = false;
    for (std::uint32_t r = 0; r < world_size_; ++r) {
      if (Awaits(r, iteration)) return std::nullopt;
      before_a_joiner = before_a_joiner || (in_[r] && first_[r] > iteration);
    }
    if (!before_a_joiner) return std::nullopt;
    last_agreed_ = iteration++;
    it = pending_.find(iteration);
  }
  const std::vector<std::optional<kernels::StepValues>>& by_rank = it->second.by_rank;
  const std::optional<kernels::StepValues>* given = nullptr;
  for (std::uint32_t r = 0; r < world_size_; ++r) {
    if (by_rank[r]) {
      given = &by_rank[r];
    } else if (Awaits(r, iteration)) {
      return std::nullopt;
    }
  }
  if (given == nullptr) return std::nullopt;
  const kernels::StepValues values = **given;  // they all agree (Give checked)
  pending_.erase(it);
  last_agreed_ = iteration;
  agreed_[iteration] = values;
  while (agreed_.size() > kKept) agreed_.erase(agreed_.begin());
  return Outcome{.kind = Kind::kAgreed, .iteration = iteration, .values = values};
}

void StepValuesLedger::MakeElastic(MemberOf member_of, const std::vector<std::uint32_t>& starting) {
  member_of_ = std::move(member_of);
  std::fill(in_.begin(), in_.end(), false);
  for (std::uint32_t rank : starting) {
    if (rank < world_size_) in_[rank] = true;
  }
}

void StepValuesLedger::Enter(std::uint32_t rank, std::uint64_t first) {
  if (rank >= world_size_) return;
  in_[rank] = true;
  first_[rank] = first;
  next_[rank] = first;
  // What the slot's earlier worker gave for iterations before `first` still counts.
  for (auto& [iteration, pending] : pending_) {
    if (iteration >= first) pending.by_rank[rank].reset();
  }
}

std::vector<StepValuesLedger::Outcome> StepValuesLedger::Leave(std::uint32_t rank) {
  if (rank < world_size_) in_[rank] = false;
  return Settle();
}

std::vector<StepValuesLedger::Outcome> StepValuesLedger::Settle() {
  std::vector<Outcome> agreed = std::move(unreported_);
  unreported_.clear();
  while (std::optional<Outcome> next = AgreeNext()) agreed.push_back(*next);
  return agreed;
}

void StepValuesLedger::Rejoin(std::uint32_t rank, std::uint64_t resume_point) {
  next_[rank] = resume_point + 1;
  for (auto& [iteration, pending] : pending_) {
    if (iteration > resume_point) pending.by_rank[rank].reset();
  }
}

std::optional<kernels::StepValues> StepValuesLedger::Agreed(std::uint64_t iteration) const {
  if (auto it = agreed_.find(iteration); it != agreed_.end()) return it->second;
  return std::nullopt;
}

std::optional<kernels::StepValues> StepValuesLedger::AgreedAtOrBefore(
    std::uint64_t iteration) const {
  auto it = agreed_.upper_bound(iteration);
  if (it == agreed_.begin()) return std::nullopt;
  return std::prev(it)->second;
}

std::string StepValuesLedger::Missing(std::uint64_t iteration) const {
  if (iteration <= last_agreed_) return "";
  auto it = pending_.find(iteration);
  std::string ranks;
  for (std::uint32_t r = 0; r < world_size_; ++r) {
    if (!Awaits(r, iteration) || (it != pending_.end() && it->second.by_rank[r])) continue;
    absl::StrAppend(&ranks, ranks.empty() ? "" : ", ", r);
    if (ranks.size() > 200) return absl::StrCat(ranks, ", ...");
  }
  return ranks;
}

}  // namespace phub::server
