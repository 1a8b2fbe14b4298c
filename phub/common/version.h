// The wire protocol's version: the data-plane header and the control-plane Hello carry it, and a
// peer with another version is refused with an error that names both numbers.
#pragma once

#include <cstdint>

namespace phub {

inline constexpr std::uint16_t kProtocolVersion = 1;

}  // namespace phub
