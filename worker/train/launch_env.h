// Rank and world size from the launcher's environment, so `mpirun -np 4 phub-worker ...` or
// `srun phub-worker ...` needs no --rank/--world: Open MPI (OMPI_COMM_WORLD_RANK/_SIZE), MPICH
// and Intel MPI (PMI_RANK/PMI_SIZE), Slurm (SLURM_PROCID/SLURM_NTASKS), in that order.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "phub/common/status.h"

namespace phub::worker {

struct LaunchRank {
  std::uint32_t rank = 0, world = 1;
  std::string source;  // "OMPI_COMM_WORLD_*", ...
};

// nullopt when no launcher variables are set; InvalidArgument naming the variable when one is
// set but not a valid number (or the rank is not below the size).
StatusOr<std::optional<LaunchRank>> RankFromEnvironment();

}  // namespace phub::worker
