#include "phub/ctl/metrics_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

namespace phub::ctl {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(MetricsText, ReadsFamiliesWithHelpTypeAndLabels) {
  const std::string text =
      "# HELP phub_core_received_bytes_total Payload bytes received by the core.\n"
      "# TYPE phub_core_received_bytes_total counter\n"
      "phub_core_received_bytes_total{core=\"0\"} 123456\n"
      "phub_core_received_bytes_total{core=\"1\"} 654321\n"
      "\n"
      "# a comment\n"
      "# TYPE phub_job_running gauge\n"
      "phub_job_running 1\n";
  const auto samples = ParseMetricsText(text);
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 3u);
  EXPECT_EQ((*samples)[0].name, "phub_core_received_bytes_total");
  EXPECT_EQ((*samples)[0].labels.at("core"), "0");
  EXPECT_EQ((*samples)[0].value, 123456);
  EXPECT_EQ((*samples)[1].labels.at("core"), "1");
  EXPECT_EQ((*samples)[1].value, 654321);
  EXPECT_EQ((*samples)[2].name, "phub_job_running");
  EXPECT_TRUE((*samples)[2].labels.empty());
  EXPECT_FALSE((*samples)[2].timestamp_ms.has_value());
}

TEST(MetricsText, UnescapesLabelValues) {
  const auto samples =
      ParseMetricsText("phub_build_info{version=\"a\\\\b\\\"c\\nd\",protocol=\"3\",} 1\n");
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ((*samples)[0].labels.at("version"), "a\\b\"c\nd");
  EXPECT_EQ((*samples)[0].labels.at("protocol"), "3");
}

TEST(MetricsText, ReadsSpecialValuesExponentsAndTimestamps) {
  const auto samples = ParseMetricsText(
      "a_bucket{le=\"+Inf\"} +Inf\n"
      "b -Inf\n"
      "c NaN\n"
      "d 1.5e-3 1700000000000\n"
      "e -2 -5\n"
      "f{ x = \"1\" , y=\"2\" } \t 7\r\n"
      "  g 3\n"
      "h{} 4\n");
  ASSERT_TRUE(samples.ok()) << samples.status();
  ASSERT_EQ(samples->size(), 8u);
  EXPECT_EQ((*samples)[0].labels.at("le"), "+Inf");
  EXPECT_TRUE(std::isinf((*samples)[0].value) && (*samples)[0].value > 0);
  EXPECT_TRUE(std::isinf((*samples)[1].value) && (*samples)[1].value < 0);
  EXPECT_TRUE(std::isnan((*samples)[2].value));
  EXPECT_DOUBLE_EQ((*samples)[3].value, 1.5e-3);
  EXPECT_EQ((*samples)[3].timestamp_ms, 1700000000000);
  EXPECT_EQ((*samples)[4].timestamp_ms, -5);
  EXPECT_EQ((*samples)[5].labels.size(), 2u);
  EXPECT_EQ((*samples)[5].value, 7);
  EXPECT_EQ((*samples)[6].name, "g");
  EXPECT_TRUE((*samples)[7].labels.empty());
}

TEST(MetricsText, EmptyBodyHasNoSamples) {
  const auto samples = ParseMetricsText("");
  ASSERT_TRUE(samples.ok());
  EXPECT_TRUE(samples->empty());
}

struct Malformed {
  std::string text;
  int line;
  std::string why;
};

TEST(MetricsText, RefusesMalformedLinesNamingTheLine) {
  const std::vector<Malformed> cases = {
      {"ok 1\n1bad 2\n", 2, "expected a metric name"},
      {"a-b 1\n", 1, "invalid character in the metric name"},
      {"a\n", 1, "missing the sample's value"},
      {"a one\n", 1, "is not a number"},
      {"a 0x10\n", 1, "is not a number"},
      {"a +-1\n", 1, "is not a number"},
      {"a 1e999\n", 1, "is not a number"},
      {"a nan(1)\n", 1, "is not a number"},
      {"a 1 2.5\n", 1, "is not an integer"},
      {"a 1 2 3\n", 1, "unexpected text after the timestamp"},
      {"a{b=\"c\" 1\n", 1, "expected ',' or '}'"},
      {"a{b=\"c 1\n", 1, "not closed by '\"'"},
      {"a{b=c} 1\n", 1, "expected '\"' to open the value of label b"},
      {"a{b} 1\n", 1, "expected '=' after label b"},
      {"a{1=\"x\"} 1\n", 1, "expected a label name"},
      {"a{b=\"\\t\"} 1\n", 1, "unknown escape"},
      {"a{b=\"x\",b=\"y\"} 1\n", 1, "label b appears twice"},
      {"a{b=\"\xff\"} 1\n", 1, "not valid UTF-8"},
      {"a{b=\"x\"\n", 1, "not closed by '}'"},
      {"# HELP\n", 1, "HELP without a valid metric name"},
      {"# HELP a bad \\t escape\n", 1, "unknown escape in HELP"},
      {"# TYPE a counter\n# TYPE a gauge\n", 2,
       "a second TYPE line for a (the first is on line 1)"},
      {"# TYPE a countr\n", 1, "TYPE must be counter, gauge"},
      {"# TYPE a counter extra\n", 1, "TYPE must be"},
      {"x 1\n\n\ny 2", 4, "does not end with '\\n'"},
      {"a 1", 1, "does not end with '\\n'"},
  };
  for (const Malformed& c : cases) {
    const auto samples = ParseMetricsText(c.text);
    ASSERT_FALSE(samples.ok()) << "accepted: " << c.text;
    EXPECT_EQ(samples.status().code(), absl::StatusCode::kInvalidArgument);
    const std::string message(samples.status().message());
    EXPECT_THAT(message, StartsWith(std::string("line ") + std::to_string(c.line) + ": "))
        << c.text;
    EXPECT_THAT(message, HasSubstr(c.why)) << c.text;
  }
}

TEST(MetricsText, QuotesOnlyABoundedPrintableExcerpt) {
  const std::string text = "bad\x01" + std::string(10000, 'x') + " 1\n";
  const auto samples = ParseMetricsText(text);
  ASSERT_FALSE(samples.ok());
  const std::string message(samples.status().message());
  EXPECT_LT(message.size(), 300u);
  EXPECT_THAT(message, HasSubstr("\\x01"));
  EXPECT_THAT(message, HasSubstr("(10006 bytes)"));
}

TEST(MetricsText, EnforcesItsLimits) {
  MetricsTextLimits limits;
  limits.max_samples = 2;
  auto r = ParseMetricsText("a 1\n# c\nb 2\nc 3\n", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), StartsWith("line 4: more than 2 samples"));

  limits = {};
  limits.max_labels_per_sample = 2;
  EXPECT_TRUE(ParseMetricsText("a{x=\"1\",y=\"2\"} 1\n", limits).ok());
  r = ParseMetricsText("a{x=\"1\",y=\"2\",z=\"3\"} 1\n", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("more than 2 labels"));

  limits = {};
  limits.max_line_bytes = 16;
  r = ParseMetricsText("a 1\nname_that_is_too_long 1\n", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), StartsWith("line 2: longer than 16 bytes"));

  limits = {};
  limits.max_lines = 3;
  r = ParseMetricsText("\n\n\n\n", limits);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(std::string(r.status().message()), StartsWith("line 4: more than 3 lines"));
}

TEST(MetricsText, FormatSampleReadsBackTheSameSample) {
  std::mt19937_64 rng(7);
  const std::string alphabet = "ab\\\"\n{}=, #\xc3\xa9";  // escapes, syntax and UTF-8 (é)
  const std::vector<double> specials = {0.0,
                                        -0.0,
                                        1e-300,
                                        std::numeric_limits<double>::denorm_min(),
                                        std::numeric_limits<double>::max(),
                                        std::numeric_limits<double>::infinity(),
                                        -std::numeric_limits<double>::infinity(),
                                        std::numeric_limits<double>::quiet_NaN()};
  for (int i = 0; i < 2000; ++i) {
    Sample s;
    s.name = std::string("m_") + std::to_string(i);
    const int labels = static_cast<int>(rng() % 4);
    for (int l = 0; l < labels; ++l) {
      std::string value;
      const int len = static_cast<int>(rng() % 6);
      for (int k = 0; k < len; ++k) {
        const std::size_t at = rng() % (alphabet.size() - 1);
        if (alphabet[at] == '\xc3') {
          value += "\xc3\xa9";
        } else if (alphabet[at] != '\xa9') {
          value += alphabet[at];
        }
      }
      s.labels[std::string("l") + std::to_string(l)] = value;
    }
    s.value = i % 5 == 0 ? specials[rng() % specials.size()]
                         : std::ldexp(static_cast<double>(rng() % 1000000) - 500000.0,
                                      static_cast<int>(rng() % 200) - 100);
    if (rng() % 2) s.timestamp_ms = static_cast<std::int64_t>(rng());
    const std::string line = FormatSample(s);
    const auto back = ParseMetricsText(line + "\n");
    ASSERT_TRUE(back.ok()) << back.status() << " for " << line;
    ASSERT_EQ(back->size(), 1u);
    const Sample& b = (*back)[0];
    EXPECT_EQ(b.name, s.name);
    EXPECT_EQ(b.labels, s.labels) << line;
    if (std::isnan(s.value)) {
      EXPECT_TRUE(std::isnan(b.value));
    } else {
      EXPECT_EQ(b.value, s.value) << line;
      EXPECT_EQ(std::signbit(b.value), std::signbit(s.value)) << line;
    }
    EXPECT_EQ(b.timestamp_ms, s.timestamp_ms);
  }
}

TEST(MetricsText, ParseMetricValueTakesTheFormatsSpellings) {
  EXPECT_EQ(ParseMetricValue("+Inf"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(ParseMetricValue("inf"), std::numeric_limits<double>::infinity());
  EXPECT_EQ(ParseMetricValue("-Inf"), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(ParseMetricValue("0.001"), 0.001);
  EXPECT_EQ(ParseMetricValue("+2.5"), 2.5);
  EXPECT_TRUE(std::isnan(*ParseMetricValue("NaN")));
  EXPECT_FALSE(ParseMetricValue(""));
  EXPECT_FALSE(ParseMetricValue("+"));
  EXPECT_FALSE(ParseMetricValue("1 "));
  EXPECT_FALSE(ParseMetricValue("0x1p3"));
}

}  // namespace
}  // namespace phub::ctl
