// libFuzzer target: what phubctl does with the bytes a /metrics endpoint sends. The input is
// parsed as Prometheus text (ParseMetricsText); whatever it accepts must survive a round trip
// through FormatSample unchanged, and every refusal must name its line. Then the input, split
// at its first NUL byte into two scrapes (or taken twice if it has none), goes through
// BuildStatusReport and both renderers: absurd numbers, hostile buckets and label values must
// give a report or a clear error, valid UTF-8 JSON, and no crash.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "phub/ctl/metrics_text.h"
#include "phub/ctl/scrape.h"
#include "phub/ctl/status_render.h"
#include "phub/ctl/status_report.h"
#include "phub/ctl/utf8.h"

namespace {

using namespace phub::ctl;

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s: %s\n", what, detail.c_str());
  std::abort();
}

bool SameValue(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

// Parses `text`; checks the refusal or the round trip. nullopt if refused.
std::optional<std::vector<Sample>> ParseAndCheck(std::string_view text) {
  auto parsed = ParseMetricsText(text);
  if (!parsed.ok()) {
    const std::string message(parsed.status().message());
    if (message.rfind("line ", 0) != 0) Fail("a refusal does not name its line", message);
    return std::nullopt;
  }
  std::string again;
  for (const Sample& s : *parsed) again += FormatSample(s) + "\n";
  // FormatSample may write a value a few bytes longer than the input did ("1e-5" -> "1e-05").
  MetricsTextLimits roomier;
  roomier.max_line_bytes += 64;
  auto reparsed = ParseMetricsText(again, roomier);
  if (!reparsed.ok()) {
    Fail("FormatSample wrote what the parser refuses", std::string(reparsed.status().message()));
  }
  if (reparsed->size() != parsed->size()) Fail("the round trip changed the sample count", again);
  for (std::size_t i = 0; i < parsed->size(); ++i) {
    const Sample& a = (*parsed)[i];
    const Sample& b = (*reparsed)[i];
    if (a.name != b.name || a.labels != b.labels || !SameValue(a.value, b.value) ||
        a.timestamp_ms != b.timestamp_ms) {
      Fail("the round trip changed a sample", FormatSample(a) + " -> " + FormatSample(b));
    }
  }
  return std::move(*parsed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::size_t nul = input.find('\0');
  const std::string_view first_text = nul == std::string_view::npos ? input : input.substr(0, nul);
  const std::string_view second_text =
      nul == std::string_view::npos ? input : input.substr(nul + 1);

  auto first = ParseAndCheck(first_text);
  auto second = nul == std::string_view::npos ? first : ParseAndCheck(second_text);
  if (!first || !second) return 0;

  const Scrape a(std::move(*first));
  const Scrape b(std::move(*second));
  const auto report = BuildStatusReport(a, b, 1.5, 2e9);
  if (!report.ok()) {
    if (report.status().message().empty()) Fail("a report refused without saying why", "");
    return 0;
  }
  const std::string text = RenderStatusText(*report, "fuzz:9100");
  const std::string json = RenderStatusJson(*report, "fuzz:9100");
  if (text.empty() || text.back() != '\n') Fail("the text report does not end a line", text);
  if (!IsValidUtf8(json)) Fail("the JSON is not UTF-8", json);
  for (char c : json.substr(0, json.size() - 1)) {
    if (static_cast<unsigned char>(c) < 0x20) Fail("a raw control character in the JSON", json);
  }
  if (json.front() != '{' || json.substr(json.size() - 2) != "}\n") {
    Fail("the JSON is not one object", json);
  }
  return 0;
}
