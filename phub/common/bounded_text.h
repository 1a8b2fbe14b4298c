// Text a peer sent, made safe to echo in an Error, a log line, a metrics label, a file name or
// phubctl's output: at most `max_bytes` of it (the length of what was cut said), and escaped so
// that it cannot forge a log line (a newline and a fake "[time] [phubd] [info]" prefix), drive a
// terminal (ANSI escapes) or leave a quoted string. A peer's 1 MiB tensor name must not come back
// to it, or land in phubd's log, a megabyte at a time.
//
// One escaper, two strengths (EscapeText below does both):
//   Escaped(text)  every byte outside printable ASCII as \n \r \t or \xHH, and backslash and both
//                  quotes as \\ \" \': reversible (UnescapeText), so two names never print alike.
//                  For a peer's string that is quoted in a line ('NAME', label="NAME").
//   Bounded(text)  the bytes outside printable ASCII escaped as above, backslash and quotes left
//                  as they are: for a whole message phubd composed (an Error's text), which may
//                  already quote an Escaped() name; Bounded(Escaped(x)) == Escaped(x), so a message
//                  passed through both is not escaped twice. Printable ASCII passes unchanged.
// Either way the result holds only printable ASCII (0x20..0x7e): no control byte, no byte that a
// terminal or a UTF-8 decoder reads as anything else.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace phub {

inline constexpr std::size_t kMaxEchoedBytes = 64;

enum class EscapeQuotes { kNo, kYes };

// `text` escaped (above), cut where its escaped form would pass `max_bytes` (an escape is never
// cut in half), then "... (N bytes)" naming the length of the whole text.
inline std::string EscapeText(std::string_view text, std::size_t max_bytes, EscapeQuotes quotes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() : max_bytes);
  std::size_t i = 0;
  for (; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    char escaped[4];
    std::size_t n = 0;
    const bool quote = c == '"' || c == '\'' || c == '\\';
    if (c == '\n') {
      escaped[0] = '\\', escaped[1] = 'n', n = 2;
    } else if (c == '\r') {
      escaped[0] = '\\', escaped[1] = 'r', n = 2;
    } else if (c == '\t') {
      escaped[0] = '\\', escaped[1] = 't', n = 2;
    } else if (c < 0x20 || c >= 0x7f) {
      escaped[0] = '\\', escaped[1] = 'x', escaped[2] = kHex[c >> 4], escaped[3] = kHex[c & 15];
      n = 4;
    } else if (quote && quotes == EscapeQuotes::kYes) {
      escaped[0] = '\\', escaped[1] = static_cast<char>(c), n = 2;
    } else {
      escaped[0] = static_cast<char>(c), n = 1;
    }
    if (out.size() + n > max_bytes) break;
    out.append(escaped, n);
  }
  if (i < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

// A peer's string to quote in a line: reversible, quotes and backslash escaped too.
inline std::string Escaped(std::string_view text, std::size_t max_bytes = kMaxEchoedBytes) {
  return EscapeText(text, max_bytes, EscapeQuotes::kYes);
}

// A whole message that may quote a peer: line-safe, not escaped twice (above).
inline std::string Bounded(std::string_view text, std::size_t max_bytes = kMaxEchoedBytes) {
  return EscapeText(text, max_bytes, EscapeQuotes::kNo);
}

// The inverse of Escaped() on text it returned whole (not cut): tests, and tools that must
// show the original bytes. Returns false on a malformed escape.
inline bool UnescapeText(std::string_view text, std::string& out) {
  out.clear();
  const auto hex = [](char h) -> int {
    if (h >= '0' && h <= '9') return h - '0';
    if (h >= 'a' && h <= 'f') return h - 'a' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\') {
      out += text[i];
      continue;
    }
    if (++i == text.size()) return false;
    switch (text[i]) {
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case '\\':
      case '"':
      case '\'':
        out += text[i];
        break;
      case 'x': {
        if (text.size() - i < 3 || hex(text[i + 1]) < 0 || hex(text[i + 2]) < 0) return false;
        out += static_cast<char>(hex(text[i + 1]) * 16 + hex(text[i + 2]));
        i += 2;
        break;
      }
      default:
        return false;
    }
  }
  return true;
}

}  // namespace phub
