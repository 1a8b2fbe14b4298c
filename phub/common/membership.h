// A process's place in a data-parallel job: rank r of world_size workers. Every component that
// takes one (PsClient, the ring, NCCL) checks it with the same words.
//
// Membership is who this process is; the options structs (PsClientOptions, RingOptions, ...)
// are how it connects, and are the same on every rank. So the worker decides its membership
// once (flags, launcher environment or topology file) and passes it by value to whatever it
// connects, instead of copying rank and world size into each options struct.
#pragma once

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "phub/common/status.h"

namespace phub {

struct Membership {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  friend bool operator==(const Membership&, const Membership&) = default;
};

// InvalidArgument unless world_size >= 1 and rank < world_size.
inline Status CheckMembership(std::uint32_t rank, std::uint32_t world_size) {
  if (world_size == 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is not in 0..world_size-1 (world size ", world_size,
        "): ranks count from 0 and world_size is the number of workers"));
  }
  return absl::OkStatus();
}
inline Status CheckMembership(Membership m) { return CheckMembership(m.rank, m.world_size); }

}  // namespace phub
