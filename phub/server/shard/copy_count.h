// Racks of racks (docs/design.md "Racks of racks"): a rack's sum of a chunk carries how many
// workers' copies it holds, as one element after the chunk's, so that the chunk's home PBox
// divides each iteration by the copies actually summed across racks (an elastic rack's members
// change from one iteration to the next) rather than by a count fixed when the job formed.
// The rack's Uplink writes it (racks/uplink.cc); the home part's shard reads and checks it as
// each push arrives (Shard::OnReceived) and divides by the counts of the copies in
// (Shard::MaybeAggregate).
//
// Why an element and not a field of the wire header: it lands in the same slot, by the same
// write, on every transport (a verbs push is an RDMA write into a landing zone: no header of
// ours travels with it), so a count can never be paired with another iteration's sum.
// A peer sends it: it is checked like any length a peer claims (ReadCopyCount).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "phub/common/status.h"
#include "phub/kernels/wire_format.h"

namespace phub::server {

// The elements a home chunk has beyond the rack's chunk it stands for: its count.
inline constexpr std::uint32_t kCountElements = 1;

// The count in the last element of `slot` (one copy in `format`; at least one element):
// InvalidArgument saying what came unless it is an integer in 0..most (a NaN, an infinity, a
// fraction, a negative number, or more copies than the sender's rack has workers).
StatusOr<std::uint32_t> ReadCopyCount(std::span<const std::byte> slot, kernels::WireFormat format,
                                      std::uint32_t most);

}  // namespace phub::server
