// Text a peer sent, made safe to echo in an Error or a log line: at most `max_bytes` of it,
// with the length of what was cut. A peer's 1 MiB tensor name must not come back to it, or
// land in phubd's log, a megabyte at a time.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>


namespace phub {

inline constexpr std::size_t kMaxEchoedBytes = 64;

inline std::string Bounded(std::string_view text, std::size_t max_bytes = kMaxEchoedBytes) {
  if (text.size() <= max_bytes) return std::string(text);
  std::string out(text.substr(0, max_bytes));
  out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace phub
