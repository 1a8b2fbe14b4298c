// Racks of racks (docs/design.md "Racks of racks"): a rack's sum of a chunk ends in two
// elements after the chunk's: how many workers' copies it holds, and how many members the
// rack's schedule gives that iteration. The chunk's home PBox divides each iteration by the
// copies actually summed across racks (an elastic rack's members change from one iteration to
// the next) rather than by a count fixed when the job formed, and, with --lr-scaling, scales
// the iteration's lr by the members over every rack (kernels::ScaledLr), a count the same for
// every chunk of the iteration, which the copies are not (a member lost mid-iteration).
// The rack's Uplink writes both (racks/uplink.cc); the home part's shard reads and checks them
// as each push arrives (Shard::OnReceived) and steps with them (Shard::MaybeAggregate).
//
// Why elements and not a field of the wire header: they land in the same slot, by the same
// write, on every transport (a verbs push is an RDMA write into a landing zone: no header of
// ours travels with it), so a count can never be paired with another iteration's sum.
// A peer sends them: they are checked like any length a peer claims (ReadRackCount).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "phub/common/status.h"
#include "phub/kernels/wire_format.h"

namespace phub::server {

// The elements a home chunk has beyond the rack's chunk it stands for: its count of copies,
// then its count of members.
inline constexpr std::uint32_t kCountElements = 2;

// What a rack's sum of a chunk says of itself.
struct RackCount {
  std::uint32_t copies = 0;   // workers' copies summed (the members whose copy is in)
  std::uint32_t members = 0;  // the rack's members of the iteration, by its schedule
};

// The counts in the last kCountElements elements of `slot` (one copy in `format`): InvalidArgument
// saying which count came as what unless both are whole numbers with copies <= members <= most
// (a NaN, an infinity, a fraction, a negative number, more members than the sender's rack has
// workers, or more copies than members).
StatusOr<RackCount> ReadRackCount(std::span<const std::byte> slot, kernels::WireFormat format,
                                  std::uint32_t most);

}  // namespace phub::server
