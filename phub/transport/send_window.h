// The default of --send-window-bytes (SendScheduler, send_scheduler.h): alone in its header
// so that options structs (phubd's, PsClient's public one) can name it without the scheduler.
#pragma once

#include <cstddef>

namespace phub::transport {

// Two default chunks (1 MiB each): a chunk queued now waits behind at most this much, plus
// the socket's unsent low-water mark (ForScheduling), before it leaves.
inline constexpr std::size_t kDefaultSendWindowBytes = 2u << 20;

}  // namespace phub::transport
