#include "phub/ctl/http_get.h"

#include <algorithm>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <condition_variable>
#include <limits>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "phub/common/bounded_text.h"

namespace phub::ctl {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// Text a peer sent (an HTTP reason phrase), safe for an error message: printable ASCII only,
// at most 64 bytes.
std::string Printable(std::string_view text) { return Escaped(text); }

std::string Ms(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// The addresses of where.host before the deadline. An address is taken as it is; a name is
// resolved by getaddrinfo on a detached thread, which this call stops waiting for at the
// deadline (the thread then finishes on its own and frees what it shares through the
// shared_ptr: nothing of this frame).
StatusOr<std::vector<tcp::endpoint>> Resolve(const HostPort& where, Clock::time_point deadline,
                                             std::chrono::milliseconds timeout) {
  const auto port = static_cast<unsigned short>(std::stoi(where.port));
  beast::error_code ec;
  const auto address = net::ip::make_address(where.host, ec);
  if (!ec) return std::vector<tcp::endpoint>{tcp::endpoint(address, port)};

  struct Shared {
    std::mutex mu;
    std::condition_variable done_cv;
    bool done = false;
    beast::error_code ec;
    std::vector<tcp::endpoint> endpoints;
  };
  auto shared = std::make_shared<Shared>();
  std::thread([shared, host = where.host, service = where.port] {
    net::io_context io;
    tcp::resolver resolver(io);
    beast::error_code resolve_ec;
    const auto results = resolver.resolve(host, service, resolve_ec);
    std::lock_guard lock(shared->mu);
    shared->ec = resolve_ec;
    for (const auto& entry : results) shared->endpoints.push_back(entry.endpoint());
    shared->done = true;
    shared->done_cv.notify_all();
  }).detach();
  std::unique_lock lock(shared->mu);
  if (!shared->done_cv.wait_until(lock, deadline, [&] { return shared->done; })) {
    return absl::DeadlineExceededError("cannot resolve host '" + where.host + "' within " +
                                       Ms(timeout));
  }
  if (shared->ec || shared->endpoints.empty()) {
    return absl::NotFoundError("cannot resolve host '" + where.host +
                               "': " + (shared->ec ? shared->ec.message() : "no address"));
  }
  return shared->endpoints;
}

// Runs the io_context until the one operation started on it completes; its handler has stored
// the result. tcp_stream's expiry (the deadline) completes it with beast::error::timeout.
void RunOne(net::io_context& io) {
  io.restart();
  io.run();
}

}  // namespace

std::string HostPort::ToString() const {
  return host.find(':') != std::string::npos ? "[" + host + "]:" + port : host + ":" + port;
}

StatusOr<HostPort> ParseHostPort(std::string_view text) {
  const auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError("'" + Printable(text) + "' is not HOST:PORT (" + why +
                                      "); e.g. localhost:9100 or [::1]:9100");
  };
  HostPort hp;
  std::string_view rest;
  if (!text.empty() && text.front() == '[') {
    const std::size_t close = text.find(']');
    if (close == std::string_view::npos) return bad("no ']' after the IPv6 address");
    hp.host = std::string(text.substr(1, close - 1));
    rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return bad("no ':PORT' after ']'");
    rest.remove_prefix(1);
  } else {
    const std::size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return bad("no ':PORT'");
    hp.host = std::string(text.substr(0, colon));
    if (hp.host.find(':') != std::string::npos) return bad("an IPv6 address needs brackets");
    rest = text.substr(colon + 1);
  }
  if (hp.host.empty()) return bad("no host");
  if (rest.empty() || rest.size() > 5 ||
      rest.find_first_not_of("0123456789") != std::string_view::npos) {
    return bad("the port is not a number");
  }
  const int port = std::stoi(std::string(rest));
  if (port < 1 || port > 65535) return bad("the port is not in 1..65535");
  hp.port = std::to_string(port);
  return hp;
}

StatusOr<std::string> HttpGet(const HostPort& where, std::string_view target,
                              const HttpGetOptions& options) {
  const Clock::time_point deadline = Clock::now() + options.timeout;
  const std::string url = "http://" + where.ToString() + std::string(target);
  PHUB_ASSIGN_OR_RETURN(const std::vector<tcp::endpoint> endpoints,
                        Resolve(where, deadline, options.timeout));

  net::io_context io;
  beast::tcp_stream stream(io);
  // One deadline for every operation below: tcp_stream closes the socket when it passes, and
  // the pending operation completes with beast::error::timeout.
  stream.expires_at(deadline);
  const auto timed_out = [&] {
    return absl::DeadlineExceededError("no complete response from " + url + " within " +
                                       Ms(options.timeout) + " (connect + read)");
  };

  beast::error_code ec;
  stream.async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
  RunOne(io);
  if (ec == beast::error::timeout) return timed_out();
  if (ec)
    return absl::UnavailableError("cannot connect to " + where.ToString() + ": " + ec.message());

  http::request<http::empty_body> request{http::verb::get, std::string(target), 11};
  request.set(http::field::host, where.ToString());
  request.set(http::field::user_agent, "phubctl");
  request.set(http::field::accept, "text/plain");
  request.set(http::field::connection, "close");
  http::async_write(stream, request, [&](beast::error_code e, std::size_t) { ec = e; });
  RunOne(io);
  if (ec == beast::error::timeout) return timed_out();
  if (ec) return absl::UnavailableError("cannot send the request to " + url + ": " + ec.message());

  // The buffer grows only as bytes arrive, by at most one read at a time; the parser refuses
  // headers and bodies over their limits (a Content-Length over the body limit at once).
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.header_limit(static_cast<std::uint32_t>(
      std::min<std::size_t>(options.max_header_bytes, std::numeric_limits<std::uint32_t>::max())));
  parser.body_limit(options.max_body_bytes);
  http::async_read(stream, buffer, parser, [&](beast::error_code e, std::size_t) { ec = e; });
  RunOne(io);
  if (ec == beast::error::timeout) return timed_out();
  if (ec == http::error::body_limit) {
    return absl::ResourceExhaustedError("the response body from " + url + " is over " +
                                        std::to_string(options.max_body_bytes) + " bytes");
  }
  if (ec == http::error::header_limit) {
    return absl::ResourceExhaustedError("the response headers from " + url + " are over " +
                                        std::to_string(options.max_header_bytes) + " bytes");
  }
  if (ec == http::error::end_of_stream || ec == http::error::partial_message ||
      ec == net::error::eof || ec == net::error::connection_reset) {
    return absl::UnavailableError(where.ToString() +
                                  " closed the connection before a complete HTTP response to GET " +
                                  std::string(target) + " (" + ec.message() + ")");
  }
  if (ec.category() == beast::error_code(http::error::bad_version).category()) {  // parse errors
    return absl::FailedPreconditionError(where.ToString() + " did not answer GET " +
                                         std::string(target) + " in HTTP (" + ec.message() + ")");
  }
  if (ec)
    return absl::UnavailableError("cannot read the response from " + url + ": " + ec.message());

  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  const auto& response = parser.get();
  if (response.result_int() != 200) {
    return absl::FailedPreconditionError(
        "HTTP " + std::to_string(response.result_int()) + " " +
        Printable(std::string_view(response.reason().data(), response.reason().size())) +
        " from GET " + url + " (expected 200)");
  }
  return std::move(parser.release().body());
}

}  // namespace phub::ctl
