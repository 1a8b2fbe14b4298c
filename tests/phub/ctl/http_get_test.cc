#include "phub/ctl/http_get.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>

#include "tests/phub/ctl/canned_http_server.h"

namespace phub::ctl {
namespace {

using fixture::CannedHttpServer;
using fixture::HttpResponse;
using fixture::Script;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = std::chrono::milliseconds(400);
// How late past the deadline an error may come: scheduling on a loaded 2-core machine.
constexpr auto kSlack = std::chrono::milliseconds(1500);

HostPort Local(std::uint16_t port) { return {"127.0.0.1", std::to_string(port)}; }

HttpGetOptions Options() {
  HttpGetOptions o;
  o.timeout = kTimeout;
  return o;
}

// Runs HttpGet and checks it came back before the deadline plus slack.
StatusOr<std::string> TimedGet(const HostPort& where, const HttpGetOptions& options) {
  const auto start = Clock::now();
  auto result = HttpGet(where, "/metrics", options);
  EXPECT_LT(Clock::now() - start, options.timeout + kSlack);
  return result;
}

TEST(HttpGet, ReturnsTheBodyOfA200) {
  const std::string body = "phub_build_info{version=\"0.1.0\",protocol=\"3\"} 1\n";
  CannedHttpServer server(Script{Script::Mode::kRespond, HttpResponse("200 OK", body)});
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, body);
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_THAT(server.requests()[0], StartsWith("GET /metrics HTTP/1.1\r\n"));
  EXPECT_THAT(server.requests()[0], HasSubstr("Host: 127.0.0.1:"));
}

TEST(HttpGet, ReadsABodyDelimitedByClose) {
  CannedHttpServer server(
      Script{Script::Mode::kRespond, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\na 1\n"});
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "a 1\n");
}

TEST(HttpGet, NamesTheStatusOfANon200) {
  CannedHttpServer server(Script{Script::Mode::kRespond, HttpResponse("404 Not Found", "no\n")});
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("HTTP 404 Not Found"));
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("http://127.0.0.1:"));
}

TEST(HttpGet, AServerThatSaysNothingTimesOut) {
  CannedHttpServer server(Script{Script::Mode::kStall, ""});
  const auto start = Clock::now();
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_FALSE(got.ok());
  EXPECT_GE(Clock::now() - start, kTimeout - std::chrono::milliseconds(50));
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("within 400 ms"));
}

TEST(HttpGet, ADripFeedingServerTimesOutAtTheOverallDeadline) {
  // A byte every 50 ms never lets a per-read timeout fire; the one deadline still does.
  CannedHttpServer server(
      Script{Script::Mode::kDrip, "HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n"});
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(HttpGet, RefusesAClaimedBodyOverTheLimitAtOnce) {
  // Only the header arrives, claiming 1 GiB: refused when the header is read, not at the deadline.
  CannedHttpServer server(
      Script{Script::Mode::kDrip, "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n"});
  HttpGetOptions options = Options();
  options.timeout = std::chrono::milliseconds(5000);
  const auto start = Clock::now();
  const auto got = HttpGet(Local(server.port()), "/metrics", options);
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(2000));
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("over 16777216 bytes"));
}

TEST(HttpGet, RefusesABodyThatGrowsPastTheLimit) {
  HttpGetOptions options = Options();
  options.timeout = std::chrono::milliseconds(5000);
  options.max_body_bytes = 1 << 20;
  const std::string big(2 << 20, 'x');
  for (const std::string& response :
       {"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + big,
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n200000\r\n" + big +
            "\r\n0\r\n\r\n"}) {
    CannedHttpServer server(Script{Script::Mode::kRespond, response});
    const auto got = HttpGet(Local(server.port()), "/metrics", options);
    ASSERT_FALSE(got.ok());
    EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted) << got.status();
  }
}

TEST(HttpGet, RefusesHeadersOverTheLimit) {
  CannedHttpServer server(Script{
      Script::Mode::kRespond,
      "HTTP/1.1 200 OK\r\nX-Big: " + std::string(100000, 'h') + "\r\nContent-Length: 0\r\n\r\n"});
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(HttpGet, SomethingThatIsNotHttpIsNamedSo) {
  CannedHttpServer server(Script{Script::Mode::kRespond, "SSH-2.0-OpenSSH_9.2\r\n\r\n"});
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(got.status().message()),
              HasSubstr("did not answer GET /metrics in HTTP"));
}

TEST(HttpGet, AHangUpIsUnavailable) {
  CannedHttpServer server(Script{Script::Mode::kHangUp, ""});
  const auto got = TimedGet(Local(server.port()), Options());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("closed the connection"));
}

TEST(HttpGet, ARefusedConnectionIsUnavailable) {
  std::uint16_t port;
  {
    boost::asio::io_context io;
    boost::asio::ip::tcp::acceptor a(io, {boost::asio::ip::make_address("127.0.0.1"), 0});
    port = a.local_endpoint().port();
  }  // closed: nothing listens there now
  const auto got = TimedGet(Local(port), Options());
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(got.status().message()), HasSubstr("cannot connect to 127.0.0.1:"));
}

TEST(HttpGet, ResolvesLocalhostByName) {
  CannedHttpServer server(Script{Script::Mode::kRespond, HttpResponse("200 OK", "a 1\n")});
  const auto got = TimedGet({"localhost", std::to_string(server.port())}, Options());
  // localhost may resolve to ::1 first, where nothing listens: the IPv4 address is then tried.
  ASSERT_TRUE(got.ok()) << got.status();
}

TEST(ParseHostPort, TakesNamesAddressesAndBracketedIpv6) {
  auto hp = ParseHostPort("phub-1:9100");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "phub-1");
  EXPECT_EQ(hp->port, "9100");
  hp = ParseHostPort("[::1]:9100");
  ASSERT_TRUE(hp.ok());
  EXPECT_EQ(hp->host, "::1");
  EXPECT_EQ(hp->ToString(), "[::1]:9100");
  EXPECT_EQ(ParseHostPort("10.0.0.5:00080")->port, "80");
}

TEST(ParseHostPort, RefusesWhatIsNotHostPort) {
  for (const char* bad : {"", "host", "host:", ":9100", "host:0", "host:65536", "host:9x",
                          "::1:9100", "[::1]9100", "[::1", "[]:1", "host:123456"}) {
    const auto hp = ParseHostPort(bad);
    ASSERT_FALSE(hp.ok()) << bad;
    EXPECT_EQ(hp.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(hp.status().message()), HasSubstr("is not HOST:PORT")) << bad;
  }
}

}  // namespace
}  // namespace phub::ctl
