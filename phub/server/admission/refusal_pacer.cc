#include "phub/server/admission/refusal_pacer.h"

#include <algorithm>
#include <cmath>

namespace phub::server {

double RefusalPacer::Decayed(const Record& record, Clock::time_point now) const {
  const double seconds = std::chrono::duration<double>(now - record.last).count();
  const double half_life = static_cast<double>(pacing_.half_life.count());
  return record.level * std::exp2(-std::max(0.0, seconds) / std::max(1.0, half_life));
}

std::chrono::milliseconds RefusalPacer::Fail(const std::string& source, Clock::time_point now) {
  auto it = records_.find(source);
  if (it == records_.end()) {
    if (records_.size() >= kMaxSources) {
      // Forget the least suspect source: the one whose decayed count is lowest.
      auto least = std::min_element(records_.begin(), records_.end(),
                                    [&](const auto& a, const auto& b) {
                                      return Decayed(a.second, now) < Decayed(b.second, now);
                                    });
      records_.erase(least);
    }
    it = records_.emplace(source, Record{}).first;
  }
  Record& record = it->second;
  record.level = Decayed(record, now) + 1;
  record.last = now;
  // 2^(level - 1) times the first delay; the exponent is bounded before exp2 so it cannot
  // overflow however many failures came.
  const double factor = std::exp2(std::min(record.level - 1, 30.0));
  const double ms = std::min(static_cast<double>(pacing_.most.count()),
                             static_cast<double>(pacing_.first.count()) * factor);
  return std::chrono::milliseconds(static_cast<std::int64_t>(ms));
}

}  // namespace phub::server
