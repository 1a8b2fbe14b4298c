// How an elastic job's learning rate follows its member count (docs/design.md "Elastic jobs"):
// the lr a job is given is its lr at its start size; iteration t steps with that lr scaled by
// members(t) / start (linear: Goyal et al.'s rule for SGD) or by its square root (the rule
// usually taken for Adam), or unscaled. One place for the rule: phubd's cores apply it, the
// flags and the Hello name it, tests check it against a float64 reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>

#include "phub/common/status.h"

namespace phub::kernels {

// The values match proto::Hello::LrScaling.
enum class LrScaling { kFixed = 0, kLinear = 1, kSqrt = 2 };

// `lr` at `members` members of a job whose lr is given for `start` members.
inline float ScaledLr(LrScaling scaling, float lr, std::uint32_t members, std::uint32_t start) {
  if (scaling == LrScaling::kFixed || start == 0) return lr;
  const double ratio = static_cast<double>(members) / static_cast<double>(start);
  return static_cast<float>(static_cast<double>(lr) *
                            (scaling == LrScaling::kLinear ? ratio : std::sqrt(ratio)));
}

inline const char* LrScalingName(LrScaling scaling) {
  switch (scaling) {
    case LrScaling::kLinear: return "linear";
    case LrScaling::kSqrt: return "sqrt";
    default: return "none";
  }
}

inline StatusOr<LrScaling> ParseLrScaling(std::string_view name) {
  if (name == "none") return LrScaling::kFixed;
  if (name == "linear") return LrScaling::kLinear;
  if (name == "sqrt") return LrScaling::kSqrt;
  return absl::InvalidArgumentError(
      std::string("--lr-scaling ").append(name).append(": give none, linear or sqrt"));
}

}  // namespace phub::kernels
