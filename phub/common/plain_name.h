// The names peers and operators give things that phubd may turn into a file name or a metrics
// label (a job, a rack): 1 to 64 characters of [A-Za-z0-9._-], not starting with '.', so no
// name is a path, hidden, or needs quoting.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace phub {

inline constexpr std::size_t kMaxPlainNameBytes = 64;
inline constexpr const char* kPlainNameRule =
    "1 to 64 characters of [A-Za-z0-9._-], not starting with '.'";

// Empty when `name` follows the rule, else what breaks it ("starts with '.'", ...).
inline std::string PlainNameFault(std::string_view name) {
  if (name.empty()) return "is empty";
  if (name.size() > kMaxPlainNameBytes) {
    return "is " + std::to_string(name.size()) + " bytes long; at most " +
           std::to_string(kMaxPlainNameBytes);
  }
  if (name[0] == '.') return "starts with '.'";
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) return "has a character outside [A-Za-z0-9._-]";
  }
  return "";
}

}  // namespace phub
