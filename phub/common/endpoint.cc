#include "phub/common/endpoint.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"

namespace phub {

StatusOr<Endpoint> ParseEndpoint(const std::string& text) {
  const std::size_t colon = text.rfind(':');
  Endpoint endpoint;
  unsigned port = 0;
  const char* end = text.data() + text.size();
  if (colon == std::string::npos || colon == 0 ||
      std::from_chars(text.data() + colon + 1, end, port).ptr != end || port == 0 ||
      port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("address '", Bounded(text),
                                                   "' is not HOST:PORT with a port in 1..65535, "
                                                   "e.g. 10.0.0.5:7070"));
  }
  endpoint.host = text.substr(0, colon);
  endpoint.port = static_cast<std::uint16_t>(port);
  return endpoint;
}

}  // namespace phub
