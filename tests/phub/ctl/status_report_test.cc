#include "phub/ctl/status_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "phub/ctl/status_render.h"
#include "tests/phub/ctl/metrics_fixture.h"

namespace phub::ctl {
namespace {

using fixture::CoreCounters;
using fixture::MetricsBody;
using fixture::PhubdState;
using ::testing::HasSubstr;

Scrape Parse(const std::string& body) {
  auto samples = ParseMetricsText(body);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return Scrape(samples.ok() ? std::move(*samples) : std::vector<Sample>{});
}

// Two scrapes of a phubd with two cores, 2 s apart: core 0 moved 4 MB in and 2 MB out, 100
// pushes and 50 aggregations, each aggregation in (0.5 ms, 1 ms], rounds in (10, 25] ms;
// core 1 was idle in between.
struct TwoScrapes {
  PhubdState before, after;
  TwoScrapes() {
    before.cores = {CoreCounters{}, CoreCounters{}};
    before.cores[0] = {.chunks = 10, .received = 1e6, .sent = 5e5, .pushes = 10, .aggregations = 5};
    before.cores[0].aggregation_counts[6] = 5;  // le 0.001
    before.cores[0].round_counts[4] = 1;        // le 0.025
    before.cores[1] = {.chunks = 6, .received = 7e6, .sent = 7e6, .pushes = 70, .aggregations = 35};
    before.cores[1].aggregation_counts[2] = 35;  // le 5e-05
    before.cores[1].round_counts[1] = 7;         // le 0.0025
    before.cpu_seconds = 10;
    after = before;
    after.cores[0].received += 4e6;
    after.cores[0].sent += 2e6;
    after.cores[0].pushes += 100;
    after.cores[0].aggregations += 50;
    after.cores[0].aggregation_counts[6] += 50;
    after.cores[0].round_counts[4] += 5;
    after.cpu_seconds = 13;
  }
};

TEST(StatusReport, RatesAreCounterDeltasOverTheInterval) {
  TwoScrapes s;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0,
                                   s.after.start_time + 3725);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->cores.size(), 2u);
  const CoreStatus& c0 = r->cores[0];
  EXPECT_EQ(c0.core, "0");
  EXPECT_EQ(c0.chunks, 10);
  EXPECT_DOUBLE_EQ(c0.received_bytes_per_s, 2e6);
  EXPECT_DOUBLE_EQ(c0.sent_bytes_per_s, 1e6);
  EXPECT_DOUBLE_EQ(c0.pushes_per_s, 50);
  EXPECT_DOUBLE_EQ(c0.aggregations_per_s, 25);
  const CoreStatus& c1 = r->cores[1];
  EXPECT_EQ(c1.received_bytes_per_s, 0);
  EXPECT_EQ(c1.pushes_per_s, 0);
  EXPECT_EQ(r->total.chunks, 16);
  EXPECT_DOUBLE_EQ(r->total.received_bytes_per_s, 2e6);
  EXPECT_DOUBLE_EQ(r->total.aggregations_per_s, 25);
  EXPECT_DOUBLE_EQ(r->process.cpu_cores, 1.5);
  EXPECT_DOUBLE_EQ(r->process.uptime_s, 3725);
  EXPECT_EQ(r->process.version, "0.1.0");
  EXPECT_EQ(r->process.protocol, "3");
  EXPECT_EQ(r->interval_s, 2.0);
}

TEST(StatusReport, QuantilesComeFromTheBucketDeltasOrElseSinceStart) {
  TwoScrapes s;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0,
                                   s.after.start_time + 10);
  ASSERT_TRUE(r.ok()) << r.status();
  // Core 0: the 50 new aggregations all in (0.0005, 0.001]: p50 half-way, from the deltas.
  EXPECT_DOUBLE_EQ(r->cores[0].aggregation_p50.seconds, 0.00075);
  EXPECT_FALSE(r->cores[0].aggregation_p50.since_start);
  EXPECT_DOUBLE_EQ(r->cores[0].aggregation_p99.seconds, 0.0005 + 0.0005 * 0.99);
  EXPECT_DOUBLE_EQ(r->cores[0].round_p50.seconds, 0.01 + 0.015 * 0.5);
  // Core 1 observed nothing in between: its cumulative buckets, marked.
  EXPECT_DOUBLE_EQ(r->cores[1].aggregation_p50.seconds, 2.5e-5 + 2.5e-5 * 0.5);
  EXPECT_TRUE(r->cores[1].aggregation_p50.since_start);
  EXPECT_TRUE(r->cores[1].round_p50.since_start);
  // The total's deltas are core 0's.
  EXPECT_DOUBLE_EQ(r->total.aggregation_p50.seconds, 0.00075);
  EXPECT_FALSE(r->total.aggregation_p50.since_start);
}

TEST(StatusReport, TheJobAndLifetimeCountersAreTheSecondScrapes) {
  TwoScrapes s;
  s.after.job_running = 1;
  s.after.world_size = 4;
  s.after.connected = 3;
  s.after.missing = 1;
  s.after.model_bytes = 102236160;
  s.after.jobs_formed = 3;
  s.after.hellos_refused = 2;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1.0,
                                   s.after.start_time + 10);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->job.state, "running");
  EXPECT_EQ(r->job.world_size, 4);
  EXPECT_EQ(r->job.workers_connected, 3);
  EXPECT_EQ(r->job.workers_missing, 1);
  EXPECT_EQ(r->job.model_bytes, 102236160);
  EXPECT_EQ(r->lifetime.jobs_formed, 3);
  EXPECT_EQ(r->lifetime.hellos_refused, 2);

  s.after.job_stalled = 1;
  EXPECT_EQ(
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1, 0)->job.state,
      "stalled");
  s.after.job_stalled = s.after.job_running = 0;
  EXPECT_EQ(
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1, 0)->job.state,
      "forming");
  s.after.world_size = 0;
  EXPECT_EQ(
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1, 0)->job.state,
      "idle");
}

TEST(StatusReport, ACounterThatWentDownCountsFromZero) {
  TwoScrapes s;
  s.after.cores[1].pushes = 8;  // reset, then 8 more
  const auto r =
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0, 0);
  ASSERT_TRUE(r.ok());
  EXPECT_DOUBLE_EQ(r->cores[1].pushes_per_s, 4);
}

TEST(StatusReport, RefusesAScrapeWithoutBuildInfo) {
  const Scrape other = Parse("node_load1 0.5\n");
  const auto r = BuildStatusReport(other, other, 1.0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("phub_build_info"));
}

TEST(StatusReport, RefusesScrapesAcrossARestart) {
  TwoScrapes s;
  s.after.start_time += 60;
  const auto r =
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1.0, 0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("restarted"));
}

TEST(StatusReport, OrdersCoresByNumberAndShowsMissingSeriesAsUnknown) {
  // Only a few series, cores 10, 2 and 0: numeric order, the rest NaN.
  const Scrape a = Parse(
      "phub_build_info{version=\"x\",protocol=\"3\"} 1\n"
      "phub_core_chunks{core=\"10\"} 1\nphub_core_chunks{core=\"2\"} 2\n"
      "phub_core_pushes_total{core=\"0\"} 5\n");
  const auto r = BuildStatusReport(a, a, 1.0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->cores.size(), 3u);
  EXPECT_EQ(r->cores[0].core, "0");
  EXPECT_EQ(r->cores[1].core, "2");
  EXPECT_EQ(r->cores[2].core, "10");
  EXPECT_TRUE(std::isnan(r->cores[0].chunks));
  EXPECT_EQ(r->cores[0].pushes_per_s, 0);
  EXPECT_TRUE(std::isnan(r->cores[1].pushes_per_s));
  EXPECT_TRUE(std::isnan(r->cores[1].aggregation_p50.seconds));
  EXPECT_TRUE(std::isnan(r->process.uptime_s));
  EXPECT_EQ(r->job.state, "unknown");
}

TEST(StatusRender, TextShowsEveryPartAndMarksSinceStartQuantiles) {
  TwoScrapes s;
  s.after.job_running = 1;
  s.after.world_size = 2;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0,
                                   s.after.start_time + 3725);
  ASSERT_TRUE(r.ok());
  const std::string text = RenderStatusText(*r, "127.0.0.1:9100");
  EXPECT_THAT(text, HasSubstr("phubd 0.1.0 (protocol 3) at 127.0.0.1:9100: up 1h 02m 05s"));
  EXPECT_THAT(text, HasSubstr("job:      running, world size 2"));
  EXPECT_THAT(text, HasSubstr("lifetime: jobs 0 formed"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "\ncore   chunks  MB/s in  MB/s out  pushes/s  aggr/s  aggr p50  aggr p99  round p50\n"));
  EXPECT_THAT(
      text,
      HasSubstr(
          "\n0          10      2.0       1.0      50.0    25.0   750.0us   995.0us    17.50ms\n"));
  EXPECT_THAT(text, HasSubstr("37.5us*"));  // core 1's, since start
  EXPECT_THAT(text, HasSubstr("\ntotal"));
  EXPECT_THAT(text, HasSubstr("since phubd started"));
}

TEST(StatusRender, JsonHasTheSameNumbersAndNullForUnknown) {
  TwoScrapes s;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0,
                                   s.after.start_time + 1);
  ASSERT_TRUE(r.ok());
  std::string json = RenderStatusJson(*r, "h:1");
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '\n');
  EXPECT_THAT(json, HasSubstr("\"target\":\"h:1\""));
  EXPECT_THAT(json, HasSubstr("\"received_bytes_per_s\":2000000"));
  EXPECT_THAT(json, HasSubstr("\"aggregation_p50\":{\"seconds\":0.00075,\"since_start\":false}"));
  EXPECT_THAT(json, HasSubstr("\"core\":\"total\""));

  StatusReport unknown = *r;
  unknown.process.resident_bytes = std::nan("");
  unknown.process.version = "bad\"\x01\xff";
  json = RenderStatusJson(unknown, "h:1");
  EXPECT_THAT(json, HasSubstr("\"resident_bytes\":null"));
  EXPECT_THAT(json, HasSubstr("\"version\":\"bad\\\"\\u0001\\ufffd\""));
}

}  // namespace
}  // namespace phub::ctl
