// The one message a verbs data connection's two sides exchange over its TCP side channel before
// any RDMA: this side's queue pair address, the receive ring for staged messages, and every
// landing zone with its registration (proto::VerbsEndpoint). Encoding and the checks a received
// one must pass live here; the connection only uses the parsed form.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "phub/transport/connection.h"
#include "phub/transport/verbs/queue_pair.h"
#include "proto/phub.pb.h"

namespace phub::transport::verbs {

// Where this side lets the peer write staged messages: `slots` slots of `slot_bytes` (header +
// payload) each, at address/rkey. The peer holds one credit per slot.
struct StagedRing {
  std::uint64_t address = 0;
  std::uint32_t rkey = 0;
  std::uint32_t slots = 0;
  std::uint32_t slot_bytes = 0;
};

// A landing zone as the writer sees it: where, with which rkey, and the iteration the next
// write there carries (the receiver infers iterations from order; the writer checks them).
struct RemoteZone {
  std::uint64_t address = 0;
  std::uint32_t rkey = 0;
  std::uint32_t bytes = 0;
  std::uint64_t next_iteration = 0;
};

// (op, worker, chunk) as one map key.
inline std::uint64_t ZoneKey(Op op, std::uint32_t worker, std::uint32_t chunk) {
  return (std::uint64_t{static_cast<std::uint8_t>(op)} << 56) |
         (std::uint64_t{worker & 0xffffffu} << 32) | chunk;
}

struct PeerEndpoint {
  QpAddress qp;
  StagedRing ring;
  std::vector<RemoteZone> zones;                        // index = immediate of a direct write
  std::unordered_map<std::uint64_t, std::uint32_t> zone_index;  // ZoneKey -> index
  std::optional<WireHeader> attach;                     // the dialer's ATTACH
};

// `zones` with their rkeys (in the same order).
struct PublishedZone {
  LandingZone zone;
  std::uint32_t rkey = 0;
};

proto::ControlMessage EncodeEndpoint(const QpAddress& qp, const StagedRing& ring,
                                     const std::vector<PublishedZone>& zones,
                                     const std::optional<WireHeader>& attach);

// InvalidArgument naming what is malformed (not an endpoint, a GID of the wrong size, a zone
// repeated or too large, a ring empty or with slots larger than any message, an ATTACH that
// does not decode as one). Unavailable with the peer's reason when it sent an Error instead.
StatusOr<PeerEndpoint> DecodeEndpoint(const proto::ControlMessage& message);

}  // namespace phub::transport::verbs
