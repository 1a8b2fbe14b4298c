// The wire protocol's version: the data-plane header and the control-plane Hello carry it, and a
// peer with another version is refused with an error that names both numbers.
#pragma once

#include <cstdint>

namespace phub {

// 2: the Hello may carry the job's optimizer (a phubd of version 1 would ignore it and run its own).
inline constexpr std::uint16_t kProtocolVersion = 2;

}  // namespace phub
