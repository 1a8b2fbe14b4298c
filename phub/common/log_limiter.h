// LogLimiter: at most `per_interval` log lines of one kind per interval, the rest counted, so
// that a peer flooding phubd with bad connections cannot flood its log too (each line still
// names what was wrong; the count of those not logged goes into the next one).
//
//   if (auto suppressed = limiter.Allow()) {
//     spdlog::warn("...{}", LogLimiter::Note(*suppressed));
//   }
//
// Not thread-safe: one per thread (a core, the control plane).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace phub {

class LogLimiter {
 public:
  using Clock = std::chrono::steady_clock;
  explicit LogLimiter(int per_interval = 10,
                      Clock::duration interval = std::chrono::seconds(10))
      : per_interval_(per_interval), interval_(interval) {}

  // A line may be logged now: how many were not logged since the last one. nullopt: count it.
  std::optional<std::uint64_t> Allow(Clock::time_point now = Clock::now()) {
    if (now - began_ >= interval_) {
      began_ = now;
      logged_ = 0;
    }
    if (logged_ >= per_interval_) {
      ++suppressed_;
      return std::nullopt;
    }
    ++logged_;
    const std::uint64_t suppressed = suppressed_;
    suppressed_ = 0;
    return suppressed;
  }

  // " (N more not logged before this)" or "".
  static std::string Note(std::uint64_t suppressed) {
    return suppressed == 0 ? std::string()
                           : " (" + std::to_string(suppressed) + " more not logged before this)";
  }

 private:
  int per_interval_;
  Clock::duration interval_;
  Clock::time_point began_{};
  int logged_ = 0;
  std::uint64_t suppressed_ = 0;
};

}  // namespace phub
