// The phubctl binary end to end: its output and exit codes against a canned phubd endpoint
// (canned_http_server.h), an unreachable port, a silent one, and bad usage.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <cstdio>

#include "tests/phub/ctl/canned_http_server.h"
#include "tests/phub/ctl/metrics_fixture.h"

namespace phub::ctl {
namespace {

using fixture::CannedHttpServer;
using fixture::HttpResponse;
using fixture::Script;
using ::testing::HasSubstr;
using ::testing::StartsWith;

struct CliRun {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};

CliRun Phubctl(const std::string& args) {
  const std::string command = std::string(PHUBCTL_PATH) + " " + args + " 2>&1";
  CliRun run;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return run;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) run.output.append(buf, n);
  const int status = pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::vector<Script> TwoScrapes() {
  fixture::PhubdState state;
  state.jobs = {fixture::FakeJob{.name = "train", .running = 1, .world_size = 2, .connected = 2},
                fixture::FakeJob{.name = "eval", .world_size = 3, .connected = 1}};
  state.cores.resize(2);
  const std::string first = fixture::MetricsBody(state);
  state.cores[0].received = 5e6;
  state.cores[0].aggregation_counts[5] = 10;
  const std::string second = fixture::MetricsBody(state);
  return {Script{Script::Mode::kRespond, HttpResponse("200 OK", first)},
          Script{Script::Mode::kRespond, HttpResponse("200 OK", second)}};
}

std::uint16_t ClosedPort() {
  boost::asio::io_context io;
  boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
  return a.local_endpoint().port();
}

TEST(PhubctlStatus, PrintsTheReportAndExitsZero) {
  CannedHttpServer server(TwoScrapes());
  const CliRun run =
      Phubctl("status 127.0.0.1:" + std::to_string(server.port()) + " --interval-ms 100");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, StartsWith("phubd 0.1.0 (protocol 3) at 127.0.0.1:"));
  EXPECT_THAT(run.output, HasSubstr("\njobs:     2 (memory charged 0 B of 8.0 GiB budget)\n"
                                    "job    state    world  connected  missing"));
  EXPECT_THAT(run.output, HasSubstr("\neval   forming      3          1        0"));
  EXPECT_THAT(run.output, HasSubstr("\ntrain  running      2          2        0"));
  EXPECT_THAT(run.output, HasSubstr("\ntotal "));
  EXPECT_EQ(server.requests().size(), 2u);
}

TEST(PhubctlStatus, JsonIsOneObject) {
  CannedHttpServer server(TwoScrapes());
  const CliRun run =
      Phubctl("status --json --interval-ms 10 127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, StartsWith("{\"target\":\"127.0.0.1:"));
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1);
  EXPECT_THAT(run.output, HasSubstr("\"jobs\":[{\"name\":\"eval\",\"state\":\"forming\""));
  EXPECT_THAT(run.output, HasSubstr("},{\"name\":\"train\",\"state\":\"running\""));
}

TEST(PhubctlStatus, AnUnreachablePortExitsOneWithAdvice) {
  const std::uint16_t port = ClosedPort();
  const CliRun run = Phubctl("status 127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("cannot connect to 127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(run.output, HasSubstr("is phubd running on 127.0.0.1 with --metrics-port " +
                                    std::to_string(port) + "?"));
}

TEST(PhubctlStatus, AnUnknownHostExitsOneNamingIt) {
  const CliRun run = Phubctl("status no-such-host.invalid:9100 --timeout-ms 2000");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("cannot resolve host 'no-such-host.invalid'"));
  // Where no DNS answers, the lookup runs into the timeout instead: the message still names it.
  if (run.output.find("within") == std::string::npos) {
    EXPECT_THAT(run.output, HasSubstr("check the host name"));
  }
}

TEST(PhubctlStatus, ASilentPortExitsOneAtTheTimeout) {
  CannedHttpServer server(Script{Script::Mode::kStall, ""});
  const auto start = std::chrono::steady_clock::now();
  const CliRun run =
      Phubctl("status 127.0.0.1:" + std::to_string(server.port()) + " --timeout-ms 300");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("within 300 ms"));
  EXPECT_THAT(run.output, HasSubstr("--timeout-ms waits longer"));
}

TEST(PhubctlStatus, SomethingElsesMetricsExitOne) {
  CannedHttpServer server(Script{Script::Mode::kRespond, HttpResponse("200 OK", "up 1\n")});
  const CliRun run = Phubctl("status --interval-ms 1 127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("no phub_build_info"));
  EXPECT_THAT(run.output, HasSubstr("--metrics-port?"));
}

TEST(PhubctlStatus, MalformedMetricsNameTheLine) {
  CannedHttpServer server(Script{Script::Mode::kRespond, HttpResponse("200 OK", "a 1\nb{ 2\n")});
  const CliRun run = Phubctl("status 127.0.0.1:" + std::to_string(server.port()));
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("is not Prometheus text: line 2: "));
}

TEST(PhubctlStatus, UsageErrorsExitTwo) {
  EXPECT_EQ(Phubctl("").exit_code, 2);
  EXPECT_EQ(Phubctl("status").exit_code, 2);
  EXPECT_EQ(Phubctl("frobnicate").exit_code, 2);
  EXPECT_EQ(Phubctl("status localhost:9100 --interval-ms 0").exit_code, 2);
  const CliRun run = Phubctl("status localhost");
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_THAT(run.output, HasSubstr("'localhost' is not HOST:PORT (no ':PORT')"));
  EXPECT_EQ(Phubctl("status --help").exit_code, 0);
}

}  // namespace
}  // namespace phub::ctl
