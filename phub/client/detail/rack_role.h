// Racks of racks (docs/design.md "Racks of racks"): who a PsClient is in a job over several
// racks. Only phub's own code connects this way: the PS exchange for a worker placed by a
// topology file (phub/exchange/ps_exchange.cc) and a PBox's uplink relaying its rack's sums
// (phub/server/racks/uplink.cc). Not part of the public API (ps_client.h).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "phub/client/ps_client.h"

namespace phub::client::detail {

struct RackRole {
  // The job spans `racks` (> 1; 0: a flat job, none of this applies) racks; this client is in
  // rack `rack` (its index in the topology file). Connect's membership is then the rack's:
  // the rank among the rack's members and their number, and host/port its PBox.
  std::uint32_t racks = 0;
  std::uint32_t rack = 0;
  // > 0: the client is a PBox relaying its rack's sums of that many workers' copies
  // (phub/server/racks/uplink.h), not a worker.
  std::uint32_t rack_workers = 0;
  // With rack_workers: the members the rack's part starts with (1..rack_workers; its
  // rack_workers if fixed), for the homes' lr scaling.
  std::uint32_t rack_start = 0;
};

// PsClient::Connect, with the Hello naming `role`.
StatusOr<std::unique_ptr<PsClient>> ConnectInRacks(const PsClientOptions& options,
                                                   Membership membership, RackRole role,
                                                   std::vector<keys::TensorSpec> tensors,
                                                   std::vector<std::span<float>> weights);

}  // namespace phub::client::detail
