// The first failure of work that runs on another thread (an event loop's callbacks), kept for
// the threads that wait on that work. It is recorded under the waiters' mutex and announced on
// their condition variable, so a waiter that checks it in its wait predicate never misses it.
// Later failures are the consequence of the first (a closed connection fails every send) and
// are dropped; the caller logs them if it wants.
#pragma once

#include <condition_variable>
#include <mutex>

#include "phub/common/status.h"

namespace phub {

class FirstError {
 public:
  FirstError(std::mutex& mu, std::condition_variable& cv) : mu_(mu), cv_(cv) {}

  // Keeps `status` (non-OK) unless an error came first, and wakes every waiter.
  // Returns whether it was kept. Must not be called with the mutex held.
  bool Record(const Status& status) {
    {
      std::lock_guard lock(mu_);
      if (!error_.ok()) return false;
      error_ = status;
    }
    cv_.notify_all();
    return true;
  }

  // OK until the first error. REQUIRES: the mutex is held.
  const Status& status() const { return error_; }

 private:
  std::mutex& mu_;
  std::condition_variable& cv_;
  Status error_;
};

}  // namespace phub
