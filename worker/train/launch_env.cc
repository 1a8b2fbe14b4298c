#include "worker/train/launch_env.h"

#include <cstdlib>
#include <stdexcept>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace phub::worker {
namespace {

std::uint32_t Parse(const char* name, const char* value) {
  std::uint32_t v = 0;
  if (!absl::SimpleAtoi(value, &v)) {
    throw std::invalid_argument(absl::StrCat("environment variable ", name, "='", value,
                                             "' is not a non-negative integer"));
  }
  return v;
}

}  // namespace

std::optional<LaunchRank> RankFromEnvironment() {
  static constexpr const char* kPairs[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                               {"PMI_RANK", "PMI_SIZE"},
                                               {"SLURM_PROCID", "SLURM_NTASKS"}};
  for (const auto& [rank_var, size_var] : kPairs) {
    const char* rank = std::getenv(rank_var);
    const char* size = std::getenv(size_var);
    if (rank == nullptr || size == nullptr) continue;
    LaunchRank r{Parse(rank_var, rank), Parse(size_var, size), absl::StrCat(rank_var, "/", size_var)};
    if (r.world < 1 || r.rank >= r.world) {
      throw std::invalid_argument(absl::StrCat(rank_var, "=", r.rank, " is not below ", size_var,
                                               "=", r.world));
    }
    return r;
  }
  return std::nullopt;
}

}  // namespace phub::worker
