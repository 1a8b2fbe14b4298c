// How fast a source may fail to authenticate. A Hello refused for its token is answered not at
// once but at a time counted from the Hello's arrival: 100 ms for a source's first failure,
// doubling with each further one up to 5 s, the count halving every minute of quiet. So:
//   - guessing is slow: a source holds at most its quota of pending control connections
//     (PendingConnections), each waiting out its delay: ~16 guesses in the first seconds, then
//     3.4 a second measured (bench/tenants/guess_rate.py), where it was 5,504;
//   - the answer's timing says nothing: whether the job exists, has a token file or not, the
//     refusal leaves at arrival + delay, the same for all (microseconds of work inside a delay
//     of 100 ms or more);
//   - a worker given a wrong token by mistake waits a tenth of a second for its error.
// A successful Hello from the same source is never slowed. Bounded: at most kMaxSources sources
// are remembered (the least suspect forgotten first). Not thread-safe: the control thread's.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <unordered_map>

namespace phub::server {

struct RefusalPacing {
  std::chrono::milliseconds first{100};
  std::chrono::milliseconds most{5000};
  std::chrono::seconds half_life{60};
};

class RefusalPacer {
 public:
  static constexpr std::size_t kMaxSources = 4096;
  using Clock = std::chrono::steady_clock;

  explicit RefusalPacer(RefusalPacing pacing = {}) : pacing_(pacing) {}

  // A failed Hello from `source` (an address) at `now`: records it, and returns how long after
  // the Hello's arrival its refusal is to be sent.
  std::chrono::milliseconds Fail(const std::string& source, Clock::time_point now);
  std::size_t sources() const { return records_.size(); }

 private:
  struct Record {
    double level = 0;  // failures, decayed
    Clock::time_point last{};
  };
  double Decayed(const Record& record, Clock::time_point now) const;

  RefusalPacing pacing_;
  std::unordered_map<std::string, Record> records_;
};

}  // namespace phub::server
