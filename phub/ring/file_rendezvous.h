// How ring ranks find each other: each rank publishes "host port" under a shared directory
// (a temp dir on one box, a shared filesystem on a cluster) and looks its neighbours up there.
// Writes are atomic (write + rename), so a reader never sees half an address.
#pragma once

#include <cstdint>
#include <string>

#include "phub/common/status.h"

namespace phub::ring {

struct PeerAddress {
  std::string host;
  std::uint16_t port = 0;
};

class FileRendezvous {
 public:
  explicit FileRendezvous(std::string directory) : directory_(std::move(directory)) {}

  Status Publish(std::uint32_t rank, const PeerAddress& address) const;
  // Waits up to timeout_ms for `rank` to publish. DeadlineExceeded names the file it waited for.
  StatusOr<PeerAddress> Lookup(std::uint32_t rank, int timeout_ms) const;

 private:
  std::string PathOf(std::uint32_t rank) const;
  std::string directory_;
};

}  // namespace phub::ring
