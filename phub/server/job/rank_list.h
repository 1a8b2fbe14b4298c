// Small sets of ranks kept as vectors (an elastic job's members, joiners, leavers): a job has
// at most a few hundred, and the control plane walks them in rank order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace phub::server::rank_list {

inline bool Has(const std::vector<std::uint32_t>& ranks, std::uint32_t rank) {
  return std::find(ranks.begin(), ranks.end(), rank) != ranks.end();
}
inline void Remove(std::vector<std::uint32_t>& ranks, std::uint32_t rank) {
  ranks.erase(std::remove(ranks.begin(), ranks.end(), rank), ranks.end());
}
// "0, 1, 2", the first 16 then "...": for log lines.
inline std::string RanksText(const std::vector<std::uint32_t>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size() && i < 16; ++i) {
    absl::StrAppend(&text, i ? ", " : "", ranks[i]);
  }
  if (ranks.size() > 16) absl::StrAppend(&text, ", ...");
  return text;
}

}  // namespace phub::server::rank_list
