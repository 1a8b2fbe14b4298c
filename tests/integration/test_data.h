// Deterministic pseudo-random model data shared by the test worker process and the tests'
// float64 reference: value = f(seed, rank, iteration, tensor, index), no state, so both sides
// regenerate exactly the same floats without talking.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace phub::testing {

inline std::uint64_t SplitMix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A float in [-1, 1).
inline float TestValue(std::uint64_t seed, std::uint32_t rank, std::uint64_t iteration,
                       std::uint32_t tensor, std::uint64_t index) {
  std::uint64_t h = SplitMix64(seed ^ SplitMix64(rank + 0x1000 * iteration) ^
                               SplitMix64((std::uint64_t{tensor} << 40) ^ index));
  return static_cast<float>(static_cast<double>(h >> 40) / static_cast<double>(1ULL << 23) - 1.0);
}

// Rank used for the initial weights (rank 0 sends them).
inline constexpr std::uint32_t kInitRank = 0xFFFFFFu;

inline std::vector<std::uint64_t> ParseSizes(const std::string& csv) {
  std::vector<std::uint64_t> sizes;
  std::stringstream in(csv);
  std::string item;
  while (std::getline(in, item, ',')) sizes.push_back(std::stoull(item));
  return sizes;
}

}  // namespace phub::testing
