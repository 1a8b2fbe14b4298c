#include "phub/metrics/registry.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

#include "phub/metrics/metric_types.h"

namespace phub::metrics {
namespace {

TEST(Registry, RendersEachFamilyOnceWithItsSeriesInTheTextFormat) {
  Registry registry;
  registry.AddCounter("b_total", "Things counted.", {{"core", "1"}}).Add(7);
  registry.AddCounter("b_total", "Things counted.", {{"core", "0"}}).Add(3);
  registry.AddGauge("a_gauge", "A level.\nSecond line \\ here.").Set(2.5);
  registry.AddCallbackGauge("c", "Read at render.", {{"name", "say \"hi\"\\\n"}},
                            [] { return -INFINITY; });
  EXPECT_EQ(registry.Render(),
            "# HELP a_gauge A level.\\nSecond line \\\\ here.\n"
            "# TYPE a_gauge gauge\n"
            "a_gauge 2.5\n"
            "# HELP b_total Things counted.\n"
            "# TYPE b_total counter\n"
            "b_total{core=\"1\"} 7\n"
            "b_total{core=\"0\"} 3\n"
            "# HELP c Read at render.\n"
            "# TYPE c gauge\n"
            // The newline in the value is phubd's escaper's "\n" (two characters), then
            // the format's escape of that backslash.
            "c{name=\"say \\\"hi\\\"\\\\\\\\n\"} -Inf\n");
}

TEST(Registry, HistogramRendersCumulativeBucketsSumAndCount) {
  Registry registry;
  Histogram& h = registry.AddHistogram("lat_seconds", "Latency.", {0.001, 0.01, 0.1},
                                       {{"core", "0"}});
  for (double v : {0.0005, 0.001, 0.002, 0.05, 3.0}) h.Observe(v);
  EXPECT_EQ(registry.Render(),
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{core=\"0\",le=\"0.001\"} 2\n"
            "lat_seconds_bucket{core=\"0\",le=\"0.01\"} 3\n"
            "lat_seconds_bucket{core=\"0\",le=\"0.1\"} 4\n"
            "lat_seconds_bucket{core=\"0\",le=\"+Inf\"} 5\n"
            "lat_seconds_sum{core=\"0\"} 3.0535\n"
            "lat_seconds_count{core=\"0\"} 5\n");
}

// Bucket counts against a naive count of the same random values, for bounds of every size
// around the 8 counts a cache line holds.
TEST(Histogram, CountsMatchANaiveCountOnRandomValues) {
  std::mt19937_64 rng(42);
  for (int bounds_count : {0, 1, 7, 8, 9, 15, 16, 17, 40}) {
    std::vector<double> bounds;
    std::uniform_real_distribution<double> bound(-5, 5);
    for (int i = 0; i < bounds_count; ++i) bounds.push_back(bound(rng));
    std::sort(bounds.begin(), bounds.end());
    Histogram h(bounds);
    std::vector<std::uint64_t> naive(bounds.size() + 1, 0);
    double sum = 0;
    std::normal_distribution<double> value(0, 3);
    for (int i = 0; i < 5000; ++i) {
      // Some values exactly on a bound: `le` is inclusive.
      const double v = (i % 10 == 0 && !bounds.empty()) ? bounds[i % bounds.size()] : value(rng);
      h.Observe(v);
      sum += v;
      std::size_t b = 0;
      while (b < bounds.size() && !(v <= bounds[b])) ++b;
      ++naive[b];
    }
    EXPECT_EQ(h.counts(), naive) << bounds_count << " bounds";
    EXPECT_EQ(h.count(), 5000u);
    EXPECT_NEAR(h.sum(), sum, 1e-9 * 5000 * 15);
  }
}

TEST(FormatValue, WritesIntegersExactlyAndOtherValuesShortestRoundTrip) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(123456789012345.0), "123456789012345");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(1e-5), "1e-05");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> d(-1e6, 1e6);
  for (int i = 0; i < 1000; ++i) {
    const double v = d(rng) / 7.0;
    EXPECT_EQ(std::strtod(FormatValue(v).c_str(), nullptr), v);
  }
}

// Writers on their own threads while another renders: every final count is exact, and a render
// in between never shows a bucket total above the count of observations made so far (run under
// TSan: the relaxed atomics must be the only shared accesses).
TEST(Registry, ConcurrentUpdatesWhileRenderingLoseNothing) {
  Registry registry;
  constexpr int kThreads = 4, kUpdates = 20000;
  std::vector<Counter*> counters;
  std::vector<Histogram*> histograms;
  for (int t = 0; t < kThreads; ++t) {
    const Labels labels{{"core", std::to_string(t)}};
    counters.push_back(&registry.AddCounter("n_total", "n", labels));
    histograms.push_back(&registry.AddHistogram("h_seconds", "h", {0.5}, labels));
  }
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const std::string text = registry.Render();
      ASSERT_NE(text.find("n_total{core=\"3\"}"), std::string::npos);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      for (int i = 0; i < kUpdates; ++i) {
        counters[t]->Add(2);
        histograms[t]->Observe(i % 2 ? 0.25 : 1.0);
      }
    });
  }
  for (auto& w : writers) w.join();
  done = true;
  reader.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_EQ(counters[t]->value(), 2u * kUpdates);
    EXPECT_EQ(histograms[t]->counts(), (std::vector<std::uint64_t>{kUpdates / 2, kUpdates / 2}));
  }
}

}  // namespace
}  // namespace phub::metrics

namespace phub::metrics {
namespace {

// A peer's string as a label value (issue 38, item 9): the text format's escapes, and no raw
// control or non-ASCII byte (phubd's one escaper, bounded_text.h, runs first).
TEST(EscapeLabelValue, EscapesTheFormatsCharactersAndEveryControlByte) {
  EXPECT_EQ(EscapeLabelValue("plain-name_1.x"), "plain-name_1.x");
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\\\nd");
  EXPECT_EQ(EscapeLabelValue("\x1b[31m\xff"), "\\\\x1b[31m\\\\xff");
  Registry registry;
  registry.AddGauge("g", "help", {{"job_name", "x\n[2026-11-27] forged{le=\"1\"}"}}).Set(1);
  const std::string text = registry.Render();
  EXPECT_NE(text.find("g{job_name=\"x\\\\n[2026-11-27] forged{le=\\\"1\\\"}\"} 1\n"),
            std::string::npos)
      << text;
}

}  // namespace
}  // namespace phub::metrics
