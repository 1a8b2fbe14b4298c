// A process's place in a data-parallel job: rank r of world_size workers. Every component that
// takes one (PsClient, the ring, NCCL) checks it with the same words.
#pragma once

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "phub/common/status.h"

namespace phub {

// InvalidArgument unless world_size >= 1 and rank < world_size.
inline Status CheckMembership(std::uint32_t rank, std::uint32_t world_size) {
  if (world_size == 0 || rank >= world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rank ", rank, " is not in 0..world_size-1 (world size ", world_size,
        "): ranks count from 0 and world_size is the number of workers"));
  }
  return absl::OkStatus();
}

}  // namespace phub
