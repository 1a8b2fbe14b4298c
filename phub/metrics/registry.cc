#include "phub/metrics/registry.h"

#include <cassert>
#include <cmath>
#include <charconv>

#include "absl/strings/str_cat.h"
#include "phub/common/bounded_text.h"

namespace phub::metrics {
namespace {

bool IsValidName(const std::string& name, bool allow_colon) {
  if (name.empty()) return false;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                        (allow_colon && c == ':');
    if (!letter && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

void AppendLabels(std::string& out, const Labels& labels, const char* le = nullptr) {
  if (labels.empty() && le == nullptr) return;
  out += '{';
  bool first = true;
  for (const auto& [key, value] : labels) {
    absl::StrAppend(&out, first ? "" : ",", key, "=\"", EscapeLabelValue(value), "\"");
    first = false;
  }
  if (le != nullptr) absl::StrAppend(&out, first ? "" : ",", "le=\"", le, "\"");
  out += '}';
}

const char* TypeName(int type) {
  static const char* const kNames[] = {"counter", "gauge", "histogram"};
  return kNames[type];
}

}  // namespace

std::string EscapeLabelValue(const std::string& value) {
  // A label value may be a peer's string (a job name): phubd's one escaper first (no control or
  // non-ASCII byte survives it, so the value is valid UTF-8 and cannot move a scraper's or a
  // terminal's cursor), then the text format's own escapes of backslash, '"' and newline.
  const std::string safe = Bounded(value, kMaxLabelValueBytes);
  std::string out;
  out.reserve(safe.size());
  for (char c : safe) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string EscapeHelp(const std::string& help) {
  std::string out;
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string FormatValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  // Counts and byte totals print as integers (exact up to 2^53); the rest round-trip.
  if (value == std::floor(value) && std::fabs(value) < 9007199254740992.0) {
    return absl::StrCat(static_cast<std::int64_t>(value));
  }
  // The shortest text that reads back as the same double (1e-05, not 1.0000000000000001e-05).
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

Registry::Family& Registry::FamilyFor(const std::string& name, const std::string& help, Type type,
                                      const Labels& labels) {
  assert(IsValidName(name, /*allow_colon=*/true));
  for ([[maybe_unused]] const auto& [key, value] : labels) {
    assert(IsValidName(key, /*allow_colon=*/false) && key.rfind("__", 0) != 0);
    assert(!(type == Type::kHistogram && key == "le"));
  }
  auto [it, inserted] = families_.try_emplace(name, Family{type, help, {}});
  assert(it->second.type == type);
#ifndef NDEBUG
  for (const Series& s : it->second.series) assert(s.labels != labels);
#endif
  return it->second;
}

Counter& Registry::AddCounter(const std::string& name, const std::string& help, Labels labels) {
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kCounter, labels);
  Counter& counter = counters_.emplace_back();
  family.series.push_back(Series{.labels = std::move(labels), .counter = &counter});
  return counter;
}

Gauge& Registry::AddGauge(const std::string& name, const std::string& help, Labels labels) {
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kGauge, labels);
  Gauge& gauge = gauges_.emplace_back();
  family.series.push_back(Series{.labels = std::move(labels), .gauge = &gauge});
  return gauge;
}

Histogram& Registry::AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<double> upper_bounds, Labels labels) {
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kHistogram, labels);
  Histogram& histogram = histograms_.emplace_back(std::move(upper_bounds));
  family.series.push_back(Series{.labels = std::move(labels), .histogram = &histogram});
  return histogram;
}

void Registry::AddCallbackGauge(const std::string& name, const std::string& help, Labels labels,
                                std::function<double()> read) {
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kGauge, labels);
  family.series.push_back(Series{.labels = std::move(labels), .read = std::move(read)});
}

void Registry::AddCallbackCounter(const std::string& name, const std::string& help, Labels labels,
                                  std::function<double()> read) {
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kCounter, labels);
  family.series.push_back(Series{.labels = std::move(labels), .read = std::move(read)});
}

void Registry::AddCallbackGaugeFamily(const std::string& name, const std::string& help,
                                      std::function<Samples()> read) {
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kGauge, {});
  family.series.push_back(Series{.labels = {}, .read_many = std::move(read)});
}

void Registry::AddCallbackCounterFamily(const std::string& name, const std::string& help,
                                        std::function<Samples()> read) {
  std::lock_guard lock(mutex_);
  Family& family = FamilyFor(name, help, Type::kCounter, {});
  family.series.push_back(Series{.labels = {}, .read_many = std::move(read)});
}

std::string Registry::Render() const {
  std::lock_guard lock(mutex_);
  std::string out;
  for (const auto& [name, family] : families_) {
    absl::StrAppend(&out, "# HELP ", name, " ", EscapeHelp(family.help), "\n# TYPE ", name, " ",
                    TypeName(static_cast<int>(family.type)), "\n");
    for (const Series& s : family.series) {
      if (s.histogram != nullptr) {
        const std::vector<std::uint64_t> counts = s.histogram->counts();
        const auto bounds = s.histogram->upper_bounds();
        std::uint64_t cumulative = 0;
        for (std::size_t i = 0; i <= bounds.size(); ++i) {
          cumulative += counts[i];
          const std::string le = i < bounds.size() ? FormatValue(bounds[i]) : "+Inf";
          absl::StrAppend(&out, name, "_bucket");
          AppendLabels(out, s.labels, le.c_str());
          absl::StrAppend(&out, " ", cumulative, "\n");
        }
        absl::StrAppend(&out, name, "_sum");
        AppendLabels(out, s.labels);
        absl::StrAppend(&out, " ", FormatValue(s.histogram->sum()), "\n", name, "_count");
        AppendLabels(out, s.labels);
        // The +Inf bucket, not count(): the two are read at different instants, and Prometheus
        // expects them equal.
        absl::StrAppend(&out, " ", cumulative, "\n");
        continue;
      }
      if (s.read_many) {
        for (const auto& [labels, value] : s.read_many()) {
          out += name;
          AppendLabels(out, labels);
          absl::StrAppend(&out, " ", FormatValue(value), "\n");
        }
        continue;
      }
      const double value = s.read         ? s.read()
                           : s.counter    ? static_cast<double>(s.counter->value())
                                          : s.gauge->value();
      out += name;
      AppendLabels(out, s.labels);
      absl::StrAppend(&out, " ", FormatValue(value), "\n");
    }
  }
  return out;
}

}  // namespace phub::metrics
