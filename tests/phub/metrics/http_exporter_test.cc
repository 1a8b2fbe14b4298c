#include "phub/metrics/http_exporter.h"

#include <gtest/gtest.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <thread>
#include <vector>

namespace phub::metrics {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// An exporter on its own io_context thread, and a blocking raw-socket client to talk to it
// (so a test can send what no HTTP library would).
class ExporterTest : public ::testing::Test {
 protected:
  void Start(ExporterOptions options = {}) {
    options.address = "127.0.0.1";
    registry_.AddCounter("phub_test_total", "A test counter.", {{"core", "0"}}).Add(41);
    auto exporter = HttpExporter::Start(context_, registry_, options);
    ASSERT_TRUE(exporter.ok()) << exporter.status();
    exporter_ = std::move(*exporter);
    guard_.emplace(asio::make_work_guard(context_));
    thread_ = std::thread([this] { context_.run(); });
  }
  void TearDown() override {
    if (!thread_.joinable()) return;
    asio::post(context_, [this] { exporter_.reset(); });
    guard_.reset();
    thread_.join();
  }

  // From `source`, a loopback address (127.0.0.2 plays another host).
  tcp::socket Connect(const std::string& source = "127.0.0.1") {
    tcp::socket socket(client_context_);
    socket.open(tcp::v4());
    socket.bind({asio::ip::make_address(source), 0});
    socket.connect({asio::ip::make_address("127.0.0.1"), exporter_->port()});
    return socket;
  }
  // Sends `request` and reads until the server closes: the whole answer.
  std::string Exchange(const std::string& request, const std::string& source = "127.0.0.1") {
    tcp::socket socket = Connect(source);
    asio::write(socket, asio::buffer(request));
    return ReadToEnd(socket);
  }
  static std::string ReadToEnd(tcp::socket& socket) {
    std::string out;
    boost::system::error_code ec;
    char buffer[4096];
    while (!ec) {
      const std::size_t n = socket.read_some(asio::buffer(buffer), ec);
      out.append(buffer, n);
    }
    return out;
  }
  static std::string Body(const std::string& response) {
    const auto at = response.find("\r\n\r\n");
    return at == std::string::npos ? "" : response.substr(at + 4);
  }

  Registry registry_;
  asio::io_context context_, client_context_;
  std::unique_ptr<HttpExporter> exporter_;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard_;
  std::thread thread_;
};

TEST_F(ExporterTest, GetMetricsAnswersTheRegistryInTheTextFormat) {
  Start();
  const std::string response = Exchange("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_EQ(response.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << response;
  EXPECT_NE(response.find("Content-Type: text/plain; version=0.0.4"), std::string::npos);
  EXPECT_NE(response.find("Connection: close"), std::string::npos);
  EXPECT_EQ(Body(response), registry_.Render());
  EXPECT_NE(Body(response).find("phub_test_total{core=\"0\"} 41\n"), std::string::npos);
  // A query string is ignored, as Prometheus' own exporters do.
  EXPECT_EQ(Body(Exchange("GET /metrics?x=1 HTTP/1.0\r\n\r\n")), registry_.Render());
}

TEST_F(ExporterTest, OtherPathsAndMethodsAreRefusedWithTheirStatus) {
  Start();
  EXPECT_EQ(Exchange("GET /nope HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 404", 0), 0u);
  EXPECT_EQ(Exchange("POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").rfind("HTTP/1.1 405", 0),
            0u);
  const std::string root = Exchange("GET / HTTP/1.1\r\n\r\n");
  EXPECT_NE(Body(root).find("/metrics"), std::string::npos) << root;
  const std::string head = Exchange("HEAD /metrics HTTP/1.1\r\n\r\n");
  EXPECT_EQ(head.rfind("HTTP/1.1 200", 0), 0u);
  EXPECT_EQ(Body(head), "");
}

TEST_F(ExporterTest, OversizedHeadersAndBodiesAreRefusedNotBuffered) {
  Start({.max_header_bytes = 1024});
  const std::string big = "GET /metrics HTTP/1.1\r\nX-Pad: " + std::string(4096, 'a') + "\r\n\r\n";
  EXPECT_EQ(Exchange(big).rfind("HTTP/1.1 431", 0), 0u);
  // A body claimed by Content-Length is refused before any of it is read.
  const std::string body = "GET /metrics HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\nxx";
  EXPECT_EQ(Exchange(body).rfind("HTTP/1.1 431", 0), 0u);
  // Garbage gets no answer, only a closed connection; the endpoint still serves.
  EXPECT_EQ(Exchange(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", 11) + "\r\n\r\n"),
            "");
  EXPECT_EQ(Exchange("GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
}

TEST_F(ExporterTest, SilentClientsAreClosedAndAnAddressAtItsQuotaTurnedAway) {
  Start({.max_connections = 16, .max_per_source = 2, .request_timeout_ms = 300});
  tcp::socket silent1 = Connect("127.0.0.2"), silent2 = Connect("127.0.0.2");
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // both accepted
  // A third from that address is closed at once (long before the 300 ms timeout could close
  // it): no answer; another address is served meanwhile.
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(Exchange("GET /metrics HTTP/1.1\r\n\r\n", "127.0.0.2"), "");
  EXPECT_EQ(Exchange("GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0), 0u);
  // The silent ones are closed by the request timeout: their reads end (not hang).
  EXPECT_EQ(ReadToEnd(silent1), "");
  EXPECT_EQ(ReadToEnd(silent2), "");
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(30));
  // Their places are free again.
  EXPECT_EQ(Exchange("GET /metrics HTTP/1.1\r\n\r\n", "127.0.0.2").rfind("HTTP/1.1 200", 0),
            0u);
}

// Issue 38's case: 20 idle connections (from five addresses) against 16 places answered 0 of
// 16 scrapes. Now each scrape takes the place of the oldest idle connection.
TEST_F(ExporterTest, IdleConnectionsCannotKeepAScrapeOut) {
  Start({.max_connections = 16, .max_per_source = 4, .request_timeout_ms = 60000});
  std::vector<tcp::socket> idle;
  for (int host = 0; host < 5; ++host) {
    for (int i = 0; i < 4; ++i) idle.push_back(Connect("127.0.0." + std::to_string(10 + host)));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int answered = 0;
  for (int scrape = 0; scrape < 16; ++scrape) {
    answered += Exchange("GET /metrics HTTP/1.1\r\n\r\n").rfind("HTTP/1.1 200", 0) == 0;
  }
  EXPECT_EQ(answered, 16);
}

TEST(HttpExporter, APortInUseIsAnErrorNamingTheFlag) {
  asio::io_context context;
  Registry registry;
  auto first = HttpExporter::Start(context, registry, {.address = "127.0.0.1"});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second =
      HttpExporter::Start(context, registry, {.address = "127.0.0.1", .port = (*first)->port()});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("--metrics-port"), std::string::npos)
      << second.status();
}

}  // namespace
}  // namespace phub::metrics
