// The names of elastic jobs that stalled lately, so that phubd refuses to start a new job under
// one of them. An elastic job's workers are restarted by their launcher (torchrun's agent stops
// and starts every worker at each change) and come back expecting the job phubd holds; past
// --rejoin-timeout-ms it stalled and ended, and without this the restarted workers would start
// a new job under the same name from their initial weights, silently — the training set back
// to its start with no error anywhere. Refused instead, with what happened and what to do.
// A fixed job's workers are told JOB_STALLED and stop; a new start of one is the user's.
//
// Bounded: at most kMaxNames names (the oldest forgotten first), each for `memory` (phubd's
// --stalled-name-memory-ms; 0: none remembered). Not thread-safe: the control thread's.
#pragma once

#include <chrono>
#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "proto/phub.pb.h"

namespace phub::server {

class StalledNames {
 public:
  static constexpr std::size_t kMaxNames = 256;
  using Clock = std::chrono::steady_clock;

  explicit StalledNames(std::chrono::milliseconds memory) : memory_(memory) {}

  // Elastic job `name` ended stalled at `now`, for `reason` (its Stall's).
  void Remember(const std::string& name, const std::string& reason, Clock::time_point now);
  // The refusal of a new job named `name` at `now`, if it stalled within `memory`.
  std::optional<proto::Error> RefusalFor(const std::string& name, Clock::time_point now);
  std::size_t size() const { return names_.size(); }

 private:
  struct Stalled {
    std::string reason;
    Clock::time_point when;
  };
  void ForgetExpired(Clock::time_point now);

  std::chrono::milliseconds memory_;
  std::map<std::string, Stalled> names_;
};

}  // namespace phub::server
