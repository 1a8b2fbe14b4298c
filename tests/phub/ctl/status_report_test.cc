#include "phub/ctl/status_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <string_view>

#include "phub/ctl/status_render.h"
#include "tests/phub/ctl/metrics_fixture.h"

namespace phub::ctl {
namespace {

using fixture::CoreCounters;
using fixture::FakeJob;
using fixture::MetricsBody;
using fixture::PhubdState;
using ::testing::HasSubstr;
using ::testing::Not;

Scrape Parse(const std::string& body) {
  auto samples = ParseMetricsText(body);
  EXPECT_TRUE(samples.ok()) << samples.status();
  return Scrape(samples.ok() ? std::move(*samples) : std::vector<Sample>{});
}

// Whether `text` is one JSON value (RFC 8259) and a newline: a strict recursive-descent check,
// as the project takes no JSON library.
class JsonChecker {
 public:
  explicit JsonChecker(std::string_view text) : s_(text) {}
  bool Document() {
    if (s_.empty() || s_.back() != '\n') return false;
    s_.remove_suffix(1);
    return Value(0) && (Space(), i_ == s_.size());
  }

 private:
  void Space() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool Eat(char c) {
    Space();
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool Literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }
  bool Digits() {
    const std::size_t start = i_;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') ++i_;
    return i_ > start;
  }
  bool Number() {
    if (i_ < s_.size() && s_[i_] == '-') ++i_;
    if (i_ < s_.size() && s_[i_] == '0') {
      ++i_;
    } else if (!Digits()) {
      return false;
    }
    if (i_ < s_.size() && s_[i_] == '.' && (++i_, !Digits())) return false;
    if (i_ < s_.size() && (s_[i_] == 'e' || s_[i_] == 'E')) {
      ++i_;
      if (i_ < s_.size() && (s_[i_] == '+' || s_[i_] == '-')) ++i_;
      if (!Digits()) return false;
    }
    return true;
  }
  bool String() {
    if (!Eat('"')) return false;
    while (i_ < s_.size()) {
      const auto c = static_cast<unsigned char>(s_[i_++]);
      if (c == '"') return true;
      if (c < 0x20) return false;
      if (c != '\\') continue;
      if (i_ >= s_.size()) return false;
      const char e = s_[i_++];
      if (e == 'u') {
        for (int k = 0; k < 4; ++k, ++i_) {
          if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_]))) return false;
        }
      } else if (std::string_view("\"\\/bfnrt").find(e) == std::string_view::npos) {
        return false;
      }
    }
    return false;
  }
  bool Value(int depth) {
    if (depth > 64) return false;
    Space();
    if (i_ >= s_.size()) return false;
    switch (s_[i_]) {
      case '{':
        ++i_;
        if (Eat('}')) return true;
        do {
          if (!String() || !Eat(':') || !Value(depth + 1)) return false;
        } while (Eat(','));
        return Eat('}');
      case '[':
        ++i_;
        if (Eat(']')) return true;
        do {
          if (!Value(depth + 1)) return false;
        } while (Eat(','));
        return Eat(']');
      case '"':
        return String();
      case 't':
        return Literal("true");
      case 'f':
        return Literal("false");
      case 'n':
        return Literal("null");
      default:
        return Number();
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

bool IsJson(std::string_view text) { return JsonChecker(text).Document(); }

TEST(JsonChecker, AcceptsJsonAndRefusesTheRest) {
  EXPECT_TRUE(IsJson("{\"a\":[1,-2.5e3,null,true,\"\\u00e9\\n\"],\"b\":{}}\n"));
  EXPECT_FALSE(IsJson("{\"a\":1,}\n"));
  EXPECT_FALSE(IsJson("{\"a\":nan}\n"));
  EXPECT_FALSE(IsJson("{\"a\":01}\n"));
  EXPECT_FALSE(IsJson("{\"a\":1}{}\n"));
  EXPECT_FALSE(IsJson("{\"a\":1}"));
  EXPECT_FALSE(IsJson("[\"\x01\"]\n"));
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
  s.after.jobs = {FakeJob{.name = "train",
                          .running = 1,
                          .world_size = 4,
                          .model_bytes = 102236160,
                          .connected = 3,
                          .missing = 1,
                          .charge = 102236160.0 * 7,
                          .weight = 2}};
  s.after.memory_charged = 102236160.0 * 7;
  s.after.jobs_formed = 3;
  s.after.hellos_refused = 2;
  s.after.refused_for_memory = 5;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1.0,
                                   s.after.start_time + 10);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->jobs_known);
  ASSERT_EQ(r->jobs.size(), 1u);
  const JobStatus& j = r->jobs[0];
  EXPECT_EQ(j.name, "train");
  EXPECT_EQ(j.state, "running");
  EXPECT_EQ(j.world_size, 4);
  EXPECT_EQ(j.workers_connected, 3);
  EXPECT_EQ(j.workers_missing, 1);
  EXPECT_EQ(j.model_bytes, 102236160);
  EXPECT_EQ(j.memory_charge_bytes, 102236160.0 * 7);
  EXPECT_EQ(j.weight, 2);
  EXPECT_EQ(r->memory_budget_bytes, 8.0 * (1 << 30));
  EXPECT_EQ(r->memory_charged_bytes, 102236160.0 * 7);
  EXPECT_EQ(r->lifetime.jobs_formed, 3);
  EXPECT_EQ(r->lifetime.hellos_refused, 2);
  EXPECT_EQ(r->lifetime.jobs_refused_for_memory, 5);

  const auto state = [&] {
    const auto report =
        BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1, 0);
    return report.ok() && report->jobs.size() == 1 ? report->jobs[0].state : "?";
  };
  s.after.jobs[0].stalled = 1;
  EXPECT_EQ(state(), "stalled");
  s.after.jobs[0].stalled = s.after.jobs[0].running = 0;
  EXPECT_EQ(state(), "forming");
}

TEST(StatusReport, NoJobsIsKnownAndEmpty) {
  TwoScrapes s;
  const auto r =
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1.0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->jobs_known);  // phub_jobs 0
  EXPECT_TRUE(r->jobs.empty());
  EXPECT_EQ(r->memory_budget_bytes, 8.0 * (1 << 30));
  EXPECT_EQ(r->memory_charged_bytes, 0);
  EXPECT_THAT(RenderStatusText(*r, "h:1"), HasSubstr("\njobs:     none (memory budget 8.0 GiB)\n"));
}

// Two jobs, written out of order: both reported, by name, each with its own numbers.
struct TwoJobs : TwoScrapes {
  TwoJobs() {
    after.jobs = {FakeJob{.name = "zeta",
                          .running = 0,
                          .world_size = 8,
                          .model_bytes = 0,
                          .connected = 5,
                          .missing = 0,
                          .charge = 3 << 20,
                          .weight = 0.5},
                  FakeJob{.name = "alpha",
                          .running = 1,
                          .world_size = 2,
                          .model_bytes = 1 << 20,
                          .connected = 2,
                          .missing = 1,
                          .charge = 5 << 20,
                          .weight = 1}};
    after.memory_charged = 8 << 20;
    after.memory_budget = 1 << 30;
    after.refused_for_memory = 4;
  }
};

TEST(StatusReport, EveryJobIsReportedByNameWithItsOwnSeries) {
  TwoJobs s;
  const auto r =
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1.0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->jobs_known);
  ASSERT_EQ(r->jobs.size(), 2u);
  const JobStatus& a = r->jobs[0];
  const JobStatus& z = r->jobs[1];
  EXPECT_EQ(a.name, "alpha");
  EXPECT_EQ(a.state, "running");
  EXPECT_EQ(a.world_size, 2);
  EXPECT_EQ(a.workers_connected, 2);
  EXPECT_EQ(a.workers_missing, 1);
  EXPECT_EQ(a.model_bytes, 1 << 20);
  EXPECT_EQ(a.memory_charge_bytes, 5 << 20);
  EXPECT_EQ(a.weight, 1);
  EXPECT_EQ(z.name, "zeta");
  EXPECT_EQ(z.state, "forming");
  EXPECT_EQ(z.world_size, 8);
  EXPECT_EQ(z.workers_connected, 5);
  EXPECT_EQ(z.workers_missing, 0);
  EXPECT_EQ(z.model_bytes, 0);
  EXPECT_EQ(z.memory_charge_bytes, 3 << 20);
  EXPECT_EQ(z.weight, 0.5);
  EXPECT_EQ(r->memory_charged_bytes, 8 << 20);
  EXPECT_EQ(r->memory_budget_bytes, 1 << 30);
}

TEST(StatusReport, AJobMissingASeriesShowsItAsUnknownNotAnothersValue) {
  const Scrape a = Parse(
      "phub_build_info{version=\"x\",protocol=\"3\"} 1\n"
      "phub_job_world_size{job_name=\"a\"} 2\nphub_job_world_size{job_name=\"b\"} 3\n"
      "phub_job_running{job_name=\"b\"} 1\nphub_workers_connected{job_name=\"b\"} 3\n"
      "phub_workers_connected 9\n");  // unlabelled: no job's
  const auto r = BuildStatusReport(a, a, 1.0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->jobs.size(), 2u);
  EXPECT_EQ(r->jobs[0].name, "a");
  EXPECT_EQ(r->jobs[0].state, "unknown");
  EXPECT_TRUE(std::isnan(r->jobs[0].workers_connected));
  EXPECT_TRUE(std::isnan(r->jobs[0].weight));
  EXPECT_EQ(r->jobs[1].state, "running");
  EXPECT_EQ(r->jobs[1].workers_connected, 3);
  EXPECT_TRUE(r->jobs_known);  // no phub_jobs, but labelled job series
  EXPECT_TRUE(std::isnan(r->memory_budget_bytes));
}

// An endpoint's label values reach the terminal escaped (issue 38, item 9): a job name with a
// newline and a forged row, ANSI escapes in the name and the version.
TEST(StatusRender, LabelValuesAreEscapedForTheTerminal) {
  const Scrape a = Parse(
      "phub_build_info{version=\"1\x1b[2J\",protocol=\"3\"} 1\n"
      "phub_job_world_size{job_name=\"x\\nforged  running 9\x1b[31m\"} 2\n");
  const auto r = BuildStatusReport(a, a, 1.0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  const std::string text = RenderStatusText(*r, "h:1");
  for (char c : text) {
    ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f)) << "a raw byte " << int(c) << ":\n" << text;
  }
  EXPECT_THAT(text, HasSubstr("x\\nforged  running 9\\x1b[31m"));
  EXPECT_THAT(text, HasSubstr("phubd 1\\x1b[2J (protocol 3)"));
  EXPECT_THAT(text, Not(HasSubstr("\nforged")));
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
  EXPECT_FALSE(r->jobs_known);
  EXPECT_TRUE(r->jobs.empty());
}

TEST(StatusReport, AnEndpointWithoutJobSeriesHasJobsUnknown) {
  // A phubd from before jobs had names: one unlabelled job, no phub_jobs.
  const Scrape a = Parse(
      "phub_build_info{version=\"x\",protocol=\"3\"} 1\n"
      "phub_job_running 1\nphub_job_world_size 4\nphub_workers_connected 4\n"
      "phub_jobs_formed_total 1\n");
  const auto r = BuildStatusReport(a, a, 1.0, 0);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->jobs_known);
  EXPECT_TRUE(r->jobs.empty());
  EXPECT_TRUE(std::isnan(r->memory_budget_bytes));
  EXPECT_TRUE(std::isnan(r->lifetime.jobs_refused_for_memory));
  const std::string text = RenderStatusText(*r, "h:1");
  EXPECT_THAT(text, HasSubstr("\njobs:     unknown (no phub_job_* series)\nlifetime: "));
  EXPECT_THAT(text, HasSubstr("- Hellos refused, - refused for memory\n"));
  const std::string json = RenderStatusJson(*r, "h:1");
  EXPECT_TRUE(IsJson(json)) << json;
  EXPECT_THAT(json, HasSubstr("\"jobs_known\":false,\"jobs\":[],"));
  EXPECT_THAT(json, HasSubstr("\"memory\":{\"budget_bytes\":null,\"charged_bytes\":null}"));
  EXPECT_THAT(json, HasSubstr("\"jobs_refused_for_memory\":null}"));
}

TEST(StatusRender, TextShowsEveryPartAndMarksSinceStartQuantiles) {
  TwoScrapes s;
  s.after.jobs = {FakeJob{.name = "j", .running = 1, .world_size = 2}};
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0,
                                   s.after.start_time + 3725);
  ASSERT_TRUE(r.ok());
  const std::string text = RenderStatusText(*r, "127.0.0.1:9100");
  EXPECT_THAT(text, HasSubstr("phubd 0.1.0 (protocol 3) at 127.0.0.1:9100: up 1h 02m 05s"));
  EXPECT_THAT(text, HasSubstr("\njobs:     1 (memory charged 0 B of 8.0 GiB budget)\n"));
  EXPECT_THAT(text, HasSubstr("\nj    running      2"));
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

TEST(StatusRender, TextHasARowPerJobAndTheMemoryLine) {
  TwoJobs s;
  const auto r =
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1.0, 0);
  ASSERT_TRUE(r.ok());
  const std::string text = RenderStatusText(*r, "h:1");
  EXPECT_THAT(text,
              HasSubstr("\njobs:     2 (memory charged 8.0 MiB of 1.0 GiB budget)\n"
                        "job    state    world  connected  missing  iteration  it/s  MB/s in  "
                        "MB/s out    model   charge  weight  rejoin\n"
                        "alpha  running      2          2        1          0  0.00        -  "
                        "       -  1.0 MiB  5.0 MiB       1       -\n"
                        "zeta   forming      8          5        0          0  0.00        -  "
                        "       -      0 B  3.0 MiB     0.5       -\n"
                        "\nlifetime: "));
  EXPECT_THAT(text, HasSubstr(" Hellos refused, 4 refused for memory\n"));
}

// Issue 38, item 11: a job's iteration, phubd's iterations per second, its bytes per second
// over the interval (from its counters), its members, and a rejoin deadline as seconds left.
struct JobsWithProgress : TwoScrapes {
  JobsWithProgress() {
    FakeJob run{.name = "run",
                .running = 1,
                .world_size = 4,
                .model_bytes = 1 << 20,
                .connected = 4,
                .missing = 0,
                .charge = 7 << 20,
                .weight = 1,
                .members = 4,
                .iteration = 120,
                .iterations_per_second = 12.5,
                .received_bytes = 1e9,
                .sent_bytes = 2e9,
                .rejoin_deadline = 0,
                .state = "running"};
    FakeJob wait = run;
    wait.name = "wait";
    wait.members = 3;
    wait.missing = 1;
    wait.iterations_per_second = 0;
    wait.rejoin_deadline = after.start_time + 100;
    wait.state = "waiting_for_rejoin";
    before.jobs = {run, wait};
    run.iteration += 25;
    run.received_bytes += 8e6;  // 4 MB/s over the 2 s interval
    run.sent_bytes += 16e6;
    after.jobs = {run, wait};
  }
};

TEST(StatusReport, AJobsProgressBytesAndRejoinDeadline) {
  JobsWithProgress s;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0,
                                   s.after.start_time + 58);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->jobs.size(), 2u);
  const JobStatus& run = r->jobs[0];
  const JobStatus& wait = r->jobs[1];
  EXPECT_EQ(run.state, "running");
  EXPECT_EQ(run.iteration, 145);
  EXPECT_EQ(run.iterations_per_second, 12.5);
  EXPECT_EQ(run.received_bytes_per_s, 4e6);
  EXPECT_EQ(run.sent_bytes_per_s, 8e6);
  EXPECT_EQ(run.members, 4);
  EXPECT_TRUE(std::isnan(run.rejoin_left_s));
  EXPECT_EQ(wait.state, "waiting_for_rejoin");
  EXPECT_EQ(wait.members, 3);
  EXPECT_EQ(wait.received_bytes_per_s, 0);
  EXPECT_EQ(wait.rejoin_left_s, 42);
  const std::string text = RenderStatusText(*r, "h:1");
  EXPECT_THAT(
      text,
      HasSubstr(
          "job   state               world  connected  missing  iteration   it/s  MB/s in  MB/s out"
          "    model   charge  weight  rejoin\n"
          "run   running                 4          4        0        145  12.50      4.0       8.0"
          "  1.0 MiB  7.0 MiB       1       -\n"
          "wait  waiting_for_rejoin      4          4        1        120   0.00      0.0       0.0"
          "  1.0 MiB  7.0 MiB       1     42s\n"))
      << text;
  const std::string json = RenderStatusJson(*r, "h:1");
  EXPECT_TRUE(IsJson(json)) << json;
  EXPECT_THAT(json, HasSubstr("\"members\":4,\"iteration\":145,\"iterations_per_second\":12.5,"
                              "\"received_bytes_per_s\":4000000,\"sent_bytes_per_s\":8000000,"
                              "\"rejoin_deadline_unix_s\":0}"));
}

TEST(StatusRender, JsonHoldsEveryJobAndTheMemory) {
  TwoJobs s;
  const auto r =
      BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 1.0, 0);
  ASSERT_TRUE(r.ok());
  const std::string json = RenderStatusJson(*r, "h:1");
  EXPECT_TRUE(IsJson(json)) << json;
  EXPECT_THAT(json,
              HasSubstr("\"jobs_known\":true,\"jobs\":["
                        "{\"name\":\"alpha\",\"state\":\"running\",\"world_size\":2,"
                        "\"workers_connected\":2,\"workers_missing\":1,\"model_bytes\":1048576,"
                        "\"memory_charge_bytes\":5242880,\"weight\":1,\"members\":0,"
                        "\"iteration\":0,\"iterations_per_second\":0,\"received_bytes_per_s\":null,"
                        "\"sent_bytes_per_s\":null,\"rejoin_deadline_unix_s\":0},"
                        "{\"name\":\"zeta\",\"state\":\"forming\",\"world_size\":8,"
                        "\"workers_connected\":5,\"workers_missing\":0,\"model_bytes\":0,"
                        "\"memory_charge_bytes\":3145728,\"weight\":0.5,\"members\":0,"
                        "\"iteration\":0,\"iterations_per_second\":0,\"received_bytes_per_s\":null,"
                        "\"sent_bytes_per_s\":null,\"rejoin_deadline_unix_s\":0}],"
                        "\"memory\":{\"budget_bytes\":1073741824,\"charged_bytes\":8388608}"));
  EXPECT_THAT(json, HasSubstr("\"jobs_refused_for_memory\":4}"));
}

TEST(StatusRender, JsonHasTheSameNumbersAndNullForUnknown) {
  TwoScrapes s;
  const auto r = BuildStatusReport(Parse(MetricsBody(s.before)), Parse(MetricsBody(s.after)), 2.0,
                                   s.after.start_time + 1);
  ASSERT_TRUE(r.ok());
  std::string json = RenderStatusJson(*r, "h:1");
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json.back(), '\n');
  EXPECT_TRUE(IsJson(json)) << json;
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
  EXPECT_TRUE(IsJson(json)) << json;
}

}  // namespace
}  // namespace phub::ctl
