// How a ring rank tells its neighbour where it listens: through the rendezvous store
// (phub/rendezvous: a shared directory or tcp://HOST:PORT), under the key "rank<N>.addr", as
// the text "host port\n" (the file store's files look as they always have).
#pragma once

#include <cstdint>
#include <string>

#include "phub/common/status.h"
#include "phub/rendezvous/rendezvous.h"

namespace phub::ring {

struct PeerAddress {
  std::string host;
  std::uint16_t port = 0;
};

std::string PeerAddressKey(std::uint32_t rank);

Status PublishPeerAddress(rendezvous::Store& store, std::uint32_t rank, const PeerAddress& address);

// Waits up to timeout_ms for `rank` to publish. DeadlineExceeded names the key and the store;
// InvalidArgument when what is there is not "host port".
StatusOr<PeerAddress> LookupPeerAddress(rendezvous::Store& store, std::uint32_t rank,
                                        int timeout_ms);

}  // namespace phub::ring
