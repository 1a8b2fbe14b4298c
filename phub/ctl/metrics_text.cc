#include "phub/ctl/metrics_text.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include "phub/common/bounded_text.h"
#include "phub/ctl/utf8.h"

namespace phub::ctl {
namespace {

constexpr std::size_t kExcerptBytes = 80;

bool IsBlank(char c) { return c == ' ' || c == '\t'; }
bool IsAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The start of a line, safe to quote in an error (a peer's line may hold anything, and the
// error goes to a terminal): phubd's one escaper, bounded_text.h.
std::string Excerpt(std::string_view line) { return Bounded(line, kExcerptBytes); }

Status LineError(std::size_t line_no, const std::string& what, std::string_view line) {
  return absl::InvalidArgumentError("line " + std::to_string(line_no) + ": " + what + ": '" +
                                    Excerpt(line) + "'");
}

// Parses one line left to right; each Read* returns false (with error_ set) on malformed text.
class LineCursor {
 public:
  explicit LineCursor(std::string_view line) : line_(line) {}

  bool AtEnd() const { return pos_ == line_.size(); }
  char Peek() const { return line_[pos_]; }
  void Advance() { ++pos_; }
  void SkipBlanks() {
    while (!AtEnd() && IsBlank(Peek())) ++pos_;
  }
  // Up to the next blank or the end.
  std::string_view Token() {
    const std::size_t start = pos_;
    while (!AtEnd() && !IsBlank(Peek())) ++pos_;
    return line_.substr(start, pos_ - start);
  }
  std::string_view Rest() const { return line_.substr(pos_); }

  // [a-zA-Z_:][a-zA-Z0-9_:]* for metric names, without ':' for label names.
  std::string_view Name(bool colons) {
    const std::size_t start = pos_;
    const auto ok = [&](char c, bool first) {
      return IsAlpha(c) || c == '_' || (colons && c == ':') || (!first && IsDigit(c));
    };
    if (AtEnd() || !ok(Peek(), true)) return {};
    while (!AtEnd() && ok(Peek(), pos_ == start)) ++pos_;
    return line_.substr(start, pos_ - start);
  }

  // After the opening quote: the unescaped value up to the closing quote, which is consumed.
  bool QuotedValue(std::string& out, std::string& error) {
    while (!AtEnd()) {
      const char c = Peek();
      ++pos_;
      if (c == '"') return true;
      if (c != '\\') {
        out += c;
        continue;
      }
      if (AtEnd()) break;
      const char e = Peek();
      ++pos_;
      if (e == '\\' || e == '"') {
        out += e;
      } else if (e == 'n') {
        out += '\n';
      } else {
        error = std::string("unknown escape '\\") + Excerpt(std::string_view(&e, 1)) +
                "' in a label value (only \\\\, \\\" and \\n)";
        return false;
      }
    }
    error = "a label value is not closed by '\"'";
    return false;
  }

 private:
  std::string_view line_;
  std::size_t pos_ = 0;
};

// Go's strconv.ParseFloat as Prometheus uses it: decimal floats, an optional sign, and
// Inf/Infinity/NaN in any case. Out-of-range values are refused rather than clamped.
bool ParseValue(std::string_view token, double& out) {
  if (token.empty()) return false;
  std::string_view digits = token;
  if (digits.front() == '+') {
    digits.remove_prefix(1);
    if (digits.empty() || digits.front() == '-' || digits.front() == '+') return false;
  }
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), out,
                                         std::chars_format::general);
  if (ec != std::errc() || end != digits.data() + digits.size()) return false;
  // from_chars takes "nan(xyz)"; Go does not.
  if (std::isnan(out) && digits.find('(') != std::string_view::npos) return false;
  return true;
}

bool ParseTimestamp(std::string_view token, std::int64_t& out) {
  if (token.empty()) return false;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), out);
  return ec == std::errc() && end == token.data() + token.size();
}

bool IsMetricType(std::string_view t) {
  return t == "counter" || t == "gauge" || t == "histogram" || t == "summary" || t == "untyped";
}

// "# HELP name doc" or "# TYPE name type"; other comments are ignored. `types` maps each name
// that had a TYPE line to that line's number (one TYPE per name).
Status ParseComment(std::string_view line, std::size_t line_no,
                    std::unordered_map<std::string, std::size_t>& types) {
  LineCursor c(line);
  c.Advance();  // '#'
  c.SkipBlanks();
  const std::string_view keyword = c.Token();
  if (keyword != "HELP" && keyword != "TYPE") return absl::OkStatus();
  c.SkipBlanks();
  const std::string_view name = c.Name(/*colons=*/true);
  if (name.empty()) {
    return LineError(line_no, std::string(keyword) + " without a valid metric name", line);
  }
  if (!c.AtEnd() && !IsBlank(c.Peek())) {
    return LineError(line_no, "invalid character in the metric name of " + std::string(keyword),
                     line);
  }
  c.SkipBlanks();
  if (keyword == "HELP") {
    const std::string_view doc = c.Rest();
    for (std::size_t i = 0; i < doc.size(); ++i) {
      if (doc[i] != '\\') continue;
      if (i + 1 == doc.size() || (doc[i + 1] != '\\' && doc[i + 1] != 'n')) {
        return LineError(line_no, "unknown escape in HELP text (only \\\\ and \\n)", line);
      }
      ++i;
    }
    return absl::OkStatus();
  }
  const std::string_view type = c.Token();
  c.SkipBlanks();
  if (!IsMetricType(type) || !c.AtEnd()) {
    return LineError(line_no,
                     "TYPE must be counter, gauge, histogram, summary or untyped, then the line's "
                     "end",
                     line);
  }
  const auto [it, inserted] = types.emplace(std::string(name), line_no);
  if (!inserted) {
    return LineError(line_no,
                     "a second TYPE line for " + std::string(name) + " (the first is on line " +
                         std::to_string(it->second) + ")",
                     line);
  }
  return absl::OkStatus();
}

StatusOr<Sample> ParseSampleLine(std::string_view line, std::size_t line_no,
                                 const MetricsTextLimits& limits) {
  LineCursor c(line);
  Sample sample;
  sample.name = std::string(c.Name(/*colons=*/true));
  if (sample.name.empty()) return LineError(line_no, "expected a metric name", line);
  if (!c.AtEnd() && !IsBlank(c.Peek()) && c.Peek() != '{') {
    return LineError(line_no, "invalid character in the metric name", line);
  }
  c.SkipBlanks();
  if (!c.AtEnd() && c.Peek() == '{') {
    c.Advance();
    while (true) {
      c.SkipBlanks();
      if (c.AtEnd()) return LineError(line_no, "the label set is not closed by '}'", line);
      if (c.Peek() == '}') break;
      const std::string label(c.Name(/*colons=*/false));
      if (label.empty()) return LineError(line_no, "expected a label name or '}'", line);
      c.SkipBlanks();
      if (c.AtEnd() || c.Peek() != '=') {
        return LineError(line_no, "expected '=' after label " + label, line);
      }
      c.Advance();
      c.SkipBlanks();
      if (c.AtEnd() || c.Peek() != '"') {
        return LineError(line_no, "expected '\"' to open the value of label " + label, line);
      }
      c.Advance();
      std::string value, error;
      if (!c.QuotedValue(value, error))
        return LineError(line_no, error + " (label " + label + ")", line);
      if (!IsValidUtf8(value)) {
        return LineError(line_no, "the value of label " + label + " is not valid UTF-8", line);
      }
      if (sample.labels.size() == limits.max_labels_per_sample) {
        return LineError(
            line_no,
            "more than " + std::to_string(limits.max_labels_per_sample) + " labels in one sample",
            line);
      }
      if (!sample.labels.emplace(label, std::move(value)).second) {
        return LineError(line_no, "label " + label + " appears twice", line);
      }
      c.SkipBlanks();
      if (c.AtEnd()) return LineError(line_no, "the label set is not closed by '}'", line);
      if (c.Peek() == ',') {
        c.Advance();
      } else if (c.Peek() != '}') {
        return LineError(line_no, "expected ',' or '}' after the value of label " + label, line);
      }
    }
    c.Advance();  // '}'
  }
  c.SkipBlanks();
  if (c.AtEnd()) return LineError(line_no, "missing the sample's value", line);
  const std::string_view value = c.Token();
  if (!ParseValue(value, sample.value)) {
    return LineError(
        line_no,
        "the value '" + Excerpt(value) + "' is not a number (a decimal float, +Inf, -Inf or NaN)",
        line);
  }
  c.SkipBlanks();
  if (!c.AtEnd()) {
    const std::string_view stamp = c.Token();
    std::int64_t ms = 0;
    if (!ParseTimestamp(stamp, ms)) {
      return LineError(
          line_no, "the timestamp '" + Excerpt(stamp) + "' is not an integer (milliseconds)", line);
    }
    sample.timestamp_ms = ms;
    c.SkipBlanks();
    if (!c.AtEnd()) return LineError(line_no, "unexpected text after the timestamp", line);
  }
  return sample;
}

std::string EscapeLabelValue(const std::string& value) {
  std::string out;
  for (char ch : value) {
    if (ch == '\\') {
      out += "\\\\";
    } else if (ch == '"') {
      out += "\\\"";
    } else if (ch == '\n') {
      out += "\\n";
    } else {
      out += ch;
    }
  }
  return out;
}

}  // namespace

StatusOr<std::vector<Sample>> ParseMetricsText(std::string_view text,
                                               const MetricsTextLimits& limits) {
  std::vector<Sample> samples;
  std::unordered_map<std::string, std::size_t> types;
  if (!text.empty() && text.back() != '\n') {
    const std::size_t last_start = text.rfind('\n') + 1;  // npos + 1 == 0
    std::size_t line_no = 1;
    for (std::size_t i = 0; i < last_start; ++i) line_no += text[i] == '\n';
    return LineError(line_no, "the last line does not end with '\\n' (was the body cut short?)",
                     text.substr(last_start));
  }
  std::size_t line_no = 0;
  for (std::size_t start = 0; start < text.size();) {
    const std::size_t end = text.find('\n', start);  // never npos: text ends with '\n'
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    if (++line_no > limits.max_lines) {
      return LineError(line_no, "more than " + std::to_string(limits.max_lines) + " lines", line);
    }
    if (line.size() > limits.max_line_bytes) {
      return LineError(line_no, "longer than " + std::to_string(limits.max_line_bytes) + " bytes",
                       line);
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t first = 0;
    while (first < line.size() && IsBlank(line[first])) ++first;
    if (first == line.size()) continue;
    line.remove_prefix(first);
    if (line.front() == '#') {
      PHUB_RETURN_IF_ERROR(ParseComment(line, line_no, types));
      continue;
    }
    if (samples.size() == limits.max_samples) {
      return LineError(line_no, "more than " + std::to_string(limits.max_samples) + " samples",
                       line);
    }
    PHUB_ASSIGN_OR_RETURN(Sample sample, ParseSampleLine(line, line_no, limits));
    samples.push_back(std::move(sample));
  }
  return samples;
}

std::optional<double> ParseMetricValue(std::string_view token) {
  double value = 0;
  if (!ParseValue(token, value)) return std::nullopt;
  return value;
}

std::string FormatSample(const Sample& sample) {
  std::string out = sample.name;
  if (!sample.labels.empty()) {
    out += '{';
    bool first = true;
    for (const auto& [name, value] : sample.labels) {
      if (!first) out += ',';
      first = false;
      out += name + "=\"" + EscapeLabelValue(value) + '"';
    }
    out += '}';
  }
  out += ' ';
  if (std::isnan(sample.value)) {
    out += "NaN";
  } else if (std::isinf(sample.value)) {
    out += sample.value > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[64];
    const auto r = std::to_chars(buf, buf + sizeof buf, sample.value);  // shortest round trip
    out.append(buf, r.ptr);
  }
  if (sample.timestamp_ms) out += ' ' + std::to_string(*sample.timestamp_ms);
  return out;
}

}  // namespace phub::ctl
