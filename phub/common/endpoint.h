// A peer's address as users write it: "HOST:PORT" (a name or an IPv4 address). One parser for
// every flag and file that names a phubd (--ps, the racks-of-racks topology file).
#pragma once

#include <cstdint>
#include <string>

#include "phub/common/status.h"

namespace phub {

struct Endpoint {
  std::string host;
  std::uint16_t port = 0;
};

// InvalidArgument names the bad text and the expected form.
StatusOr<Endpoint> ParseEndpoint(const std::string& text);

}  // namespace phub
