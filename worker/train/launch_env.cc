#include "worker/train/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace phub::worker {
namespace {

StatusOr<std::uint32_t> Parse(const char* name, const char* value) {
  std::uint32_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) {
    return absl::InvalidArgumentError(absl::StrCat("environment variable ", name, "='", value,
                                                   "' is not a non-negative integer"));
  }
  return v;
}

}  // namespace

StatusOr<std::optional<LaunchRank>> RankFromEnvironment() {
  static constexpr const char* kPairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                               {"PMI_RANK", "PMI_SIZE"},
                                               {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& [rank_var, size_var] : kPairs) {
    const char* rank = std::getenv(rank_var);
    const char* size = std::getenv(size_var);
    if (rank == nullptr || size == nullptr) continue;
    LaunchRank r{0, 1, absl::StrCat(rank_var, "/", size_var)};
    PHUB_ASSIGN_OR_RETURN(r.rank, Parse(rank_var, rank));
    PHUB_ASSIGN_OR_RETURN(r.world, Parse(size_var, size));
    if (r.world < 1 || r.rank >= r.world) {
      return absl::InvalidArgumentError(
          absl::StrCat(rank_var, "=", r.rank, " is not below ", size_var, "=", r.world));
    }
    return std::optional<LaunchRank>(std::move(r));
  }
  return std::optional<LaunchRank>();
}

}  // namespace phub::worker
