#include "phub/server/admission/stalled_names.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "phub/server/admission/hello_check.h"

namespace phub::server {

void StalledNames::Remember(const std::string& name, const std::string& reason,
                            Clock::time_point now) {
  if (memory_.count() <= 0) return;
  ForgetExpired(now);
  if (names_.size() >= kMaxNames && !names_.contains(name)) {
    names_.erase(std::min_element(names_.begin(), names_.end(), [](const auto& a, const auto& b) {
      return a.second.when < b.second.when;
    }));
  }
  names_[name] = Stalled{reason, now};
}

std::optional<proto::Error> StalledNames::RefusalFor(const std::string& name,
                                                     Clock::time_point now) {
  ForgetExpired(now);
  auto it = names_.find(name);
  if (it == names_.end()) return std::nullopt;
  using std::chrono::duration_cast;
  using std::chrono::seconds;
  const auto ago = duration_cast<seconds>(now - it->second.when).count();
  const auto left = duration_cast<seconds>(it->second.when + memory_ - now).count() + 1;
  return MakeError(
      proto::Error::JOB_STALLED,
      absl::StrCat("elastic job '", name, "' stalled ", ago, " s ago (", it->second.reason,
                   ") and ended with its weights; a new job under its name would start again "
                   "from the workers' initial weights"),
      absl::StrCat("to go on from where it was, resume it from its checkpoint (phubd --resume); "
                   "to start anew, give the job a new name (torchrun --rdzv_id, job=); or start "
                   "it again in ",
                   left, " s (phubd --stalled-name-memory-ms)"));
}

void StalledNames::ForgetExpired(Clock::time_point now) {
  std::erase_if(names_, [&](const auto& entry) { return now - entry.second.when >= memory_; });
}

}  // namespace phub::server
