// The two JSON leaves phubctl writes by hand (the project takes no JSON library for one object):
// strings, escaped so that any bytes a peer sent come out as valid JSON, and numbers.
#pragma once

#include <string>
#include <string_view>

namespace phub::ctl {

// `s` as a quoted JSON string: " \ and control characters escaped, bytes that are not UTF-8
// replaced by \ufffd (JSON text must be UTF-8).
std::string JsonString(std::string_view s);

// `v` as the shortest JSON number that reads back as the same double; null for NaN and the
// infinities, which JSON cannot write.
std::string JsonNumber(double v);

}  // namespace phub::ctl
