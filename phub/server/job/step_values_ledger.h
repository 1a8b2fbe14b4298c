// StepValuesLedger: a job's hyper-parameters per iteration (docs/design.md "Hyper-parameters per
// iteration"), as its ranks give them. Each rank gives the values of each iteration, in order,
// before pushing it (proto StepValues); once every rank has given iteration t's and they agree,
// t's values are the job's (the shards step t's chunks with them). Pure bookkeeping, on the
// control plane's thread: no I/O, no clock.
//
// Memory is bounded whatever a rank sends: a rank's values must be for its next iteration and
// at most kAhead past the job's last agreed one (an honest worker is never more than one ahead:
// it pushes iteration t + 1 only once t's weights came back, which needed t's values agreed),
// so at most kAhead iterations are pending; the agreed values of the last kKept iterations are
// kept for rejoins, Welcomes and checkpoints. In an elastic job an iteration is agreed once
// each of its members still in the job has given its values (MakeElastic).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "phub/kernels/optimizer_config.h"

namespace phub::server {

class StepValuesLedger {
 public:
  static constexpr std::uint64_t kAhead = 2;
  static constexpr std::size_t kKept = 4;

  struct Outcome {
    enum class Kind {
      kWaiting,    // taken: the iteration still waits for other ranks' values
      kAgreed,     // taken, and the iteration's values are now the job's: step with `values`
      kRefused,    // not taken: the message was wrong (`why`); the rank is refused
      kDisagreed,  // the rank's values differ from another's for one iteration (`why` names
                   // both): the job cannot go on
    };
    Kind kind = Kind::kWaiting;
    std::uint64_t iteration = 0;
    kernels::StepValues values{};
    std::string why{};
  };

  // The job steps `kind` over `world_size` ranks from iteration `start` (0, or the iteration it
  // resumed at; its values `start_values` where known).
  StepValuesLedger(kernels::OptimizerKind kind, std::uint32_t world_size, std::uint64_t start,
                   std::optional<kernels::StepValues> start_values = std::nullopt);

  // `rank` (< world size, checked by the caller) gives `values` for `iteration`.
  Outcome Give(std::uint32_t rank, std::uint64_t iteration, const kernels::StepValues& values);
  // `rank` rejoins at `resume_point`: its next values are for resume_point + 1, and what it gave
  // for later iterations is forgotten (it gives them again as it replays).
  void Rejoin(std::uint32_t rank, std::uint64_t resume_point);

  // Elastic jobs (docs/design.md "Elastic jobs"): iteration t waits for the values of the
  // ranks that are members of t (`member_of`, the job's schedule) and are in the ledger:
  // `starting` from the start, a joiner from its first iteration (Enter), until it leaves
  // (Leave). Values a rank gave before it left still count. Unset (a fixed job): every rank.
  using MemberOf = std::function<bool(std::uint32_t rank, std::uint64_t iteration)>;
  void MakeElastic(MemberOf member_of, const std::vector<std::uint32_t>& starting);
  // `rank` gives values from iteration `first` on (its first push).
  void Enter(std::uint32_t rank, std::uint64_t first);
  // `rank` gives no more: no iteration waits for it. Returns the iterations agreed now that
  // it does not (in order); so does Settle, after the schedule changed, or after a Give that
  // agreed an iteration before its own (its Outcome names only its own).
  std::vector<Outcome> Leave(std::uint32_t rank);
  std::vector<Outcome> Settle();

  // The agreed values of `iteration`, if kept.
  std::optional<kernels::StepValues> Agreed(std::uint64_t iteration) const;
  // The newest agreed values up to `iteration`, if kept: an iteration passed without values
  // (every member lost) stands where the one before it stood.
  std::optional<kernels::StepValues> AgreedAtOrBefore(std::uint64_t iteration) const;
  std::uint64_t last_agreed() const { return last_agreed_; }
  // The ranks that have not given `iteration`'s values (all, for an iteration nobody gave),
  // e.g. "1, 3": for the error when a job waits on them. Empty once it is agreed.
  std::string Missing(std::uint64_t iteration) const;

 private:
  struct Pending {
    std::vector<std::optional<kernels::StepValues>> by_rank;
  };
  std::string Describe(const kernels::StepValues& values) const;
  // Whether `iteration` waits for `rank`'s values.
  bool Awaits(std::uint32_t rank, std::uint64_t iteration) const;
  // last_agreed_ + 1, if every rank it awaits has given its values (and somebody has).
  std::optional<Outcome> AgreeNext();

  kernels::OptimizerKind kind_;
  std::uint32_t world_size_;
  std::vector<std::uint64_t> next_;  // by rank: the iteration its next values are for
  std::vector<bool> in_;             // by rank: it gives values (elastic: a member, or joining)
  std::vector<std::uint64_t> first_; // by rank: the first iteration it gives
  MemberOf member_of_;               // elastic: the job's schedule
  std::uint64_t last_agreed_;
  std::map<std::uint64_t, Pending> pending_;               // at most kAhead
  std::map<std::uint64_t, kernels::StepValues> agreed_;    // at most kKept
  std::vector<Outcome> unreported_;  // agreed by a Give, not its own iteration: for Settle
};

}  // namespace phub::server
