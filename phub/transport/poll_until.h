// Waiting for one descriptor with a deadline: what a bounded connect(2) and a bounded blocking
// read both need (asio's synchronous calls take no deadline).
#pragma once

#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "phub/common/status.h"

namespace phub::transport {

// True once `fd` is ready for `events` (POLLIN, POLLOUT; an error or hang-up counts as ready:
// the next call on it says which), false when `deadline` came first. EINTR is retried; another
// poll(2) failure is Unavailable naming `what`.
inline StatusOr<bool> PollUntil(int fd, short events,
                                std::chrono::steady_clock::time_point deadline,
                                const char* what) {
  while (true) {
    const std::int64_t left = std::max<std::int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(
               deadline - std::chrono::steady_clock::now())
               .count());
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, static_cast<int>(std::min<std::int64_t>(left, 1 << 30)));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) {
      return absl::UnavailableError(absl::StrCat(what, ": poll: ", std::strerror(errno)));
    }
    if (ready == 0 && std::chrono::steady_clock::now() >= deadline) return false;
  }
}

}  // namespace phub::transport
