// The dropout mask as a pure function of (seed, element index), so that the kernel needs no
// random-number state, the backward regenerates the mask instead of storing it, and a test can
// recompute it on the host. Counter-based: element i draws splitmix64's (i+1)-th output for
// `seed` (Steele, Lea, Flood 2014), whose finaliser passes BigCrush on consecutive inputs.
// Included by the .cu kernels and by host code alike.
#pragma once

#include <cstdint>

#include "phub/common/host_device.h"

namespace phub::worker::cudnn {

PHUB_HOST_DEVICE inline std::uint64_t SplitMix64(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t z = seed + (index + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Element `index` is kept when a uniform 24-bit fraction (exact in a float) is >= p: kept with
// probability 1 - p, to 2^-24.
PHUB_HOST_DEVICE inline bool DropoutKeeps(std::uint64_t seed, std::uint64_t index, float p) {
  const float u = static_cast<float>(SplitMix64(seed, index) >> 40) * (1.0f / 16777216.0f);
  return u >= p;
}

}  // namespace phub::worker::cudnn
