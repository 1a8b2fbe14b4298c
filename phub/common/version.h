// The wire protocol's version: the data-plane header and the control-plane Hello carry it, and a
// peer with another version is refused with an error that names both numbers.
#pragma once

#include <cstdint>

namespace phub {

// 2: the Hello may carry the job's optimizer (a phubd of version 1 would ignore it and run its own).
// 3: with compact weights (--wire bf16|fp16 --wire-weights wire) phubd sends a worker's first
//    weights whole as INIT and later ones as rounded changes (a version-2 worker would take the
//    changes for the weights).
// 4: phubd opens every control connection with a Challenge and the Hello carries a proof of the
//    token instead of the token (a version-3 worker would send its token in clear, and wait).
inline constexpr std::uint16_t kProtocolVersion = 4;

}  // namespace phub
