// A parser of the Prometheus text exposition format, version 0.0.4 (what phubd's /metrics
// serves, phub/metrics/), into samples. It reads bytes that came over the network, so nothing in
// them is trusted: every line is checked, a malformed one is refused with its line number and
// what was wrong, and what the parser keeps is bounded by MetricsTextLimits (the HTTP client
// bounds the body itself, http_get.h).
//
// Accepted, per line (trailing '\r' tolerated, '\n' separates lines):
//   empty line, or blanks only                      ignored
//   # HELP <name> <docstring>                        checked (name, escapes \\ and \n), dropped
//   # TYPE <name> counter|gauge|histogram|summary|untyped   checked; one per name
//   # anything else                                  a comment, ignored
//   <name>[{l="v",...[,]}] <value> [<timestamp>]     a sample
// Names are [a-zA-Z_:][a-zA-Z0-9_:]*, label names [a-zA-Z_][a-zA-Z0-9_]* (no duplicates in a
// sample), label values escape \\ \" and \n. Values are decimal floats or +Inf, -Inf, Inf, NaN
// (any case); a timestamp is an integer (milliseconds), kept but not interpreted.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "phub/common/status.h"

namespace phub::ctl {

struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
  std::optional<std::int64_t> timestamp_ms;
};

// What one body may make the parser hold. The defaults are far above what phubd serves (about
// 40 series per core: a 1024-core phubd is ~42,000 samples) and bound memory to tens of MB.
struct MetricsTextLimits {
  std::size_t max_lines = 2'000'000;
  std::size_t max_line_bytes = 64 * 1024;
  std::size_t max_samples = 250'000;
  std::size_t max_labels_per_sample = 32;
};

// The samples of `text` in the order they appear. Errors are InvalidArgument and start with
// "line N: " (1-based) followed by what was wrong and a bounded excerpt of the line.
StatusOr<std::vector<Sample>> ParseMetricsText(std::string_view text,
                                               const MetricsTextLimits& limits = {});

// A value as the format writes it (a sample's value, a histogram's le bound): a decimal float,
// or +Inf, -Inf, Inf, NaN in any case; nullopt for anything else, out-of-range numbers included.
std::optional<double> ParseMetricValue(std::string_view token);

// One sample line (no '\n') that ParseMetricsText reads back as `sample`: label values escaped,
// the value written so that it parses to the same double (NaN and infinities by name).
// REQUIRES: sample.name and the label names are valid names (see above).
std::string FormatSample(const Sample& sample);

}  // namespace phub::ctl
