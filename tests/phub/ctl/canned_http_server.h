// A small HTTP server on 127.0.0.1:0 for http_get's tests: on its own thread, each connection
// reads the request's header and then does what the test's Script says: answer with canned
// bytes, stall, drip a byte at a time, or hang up. It plays phubd's metrics endpoint and every
// way that endpoint (or something else on its port) can misbehave.
//
// Thread-safety: construct and destroy on the test's thread; port() and requests() from any.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace phub::ctl::fixture {

struct Script {
  enum class Mode {
    kRespond,  // send `bytes`, then close
    kStall,    // read the request, then say nothing and keep the connection open
    kDrip,     // send `bytes`, then one more byte every 50 ms, forever
    kHangUp,   // read the request, then close without a word
  };
  Mode mode = Mode::kRespond;
  std::string bytes;
};

// "HTTP/1.1 <status>" with Content-Length, Connection: close and `body`.
std::string HttpResponse(const std::string& status, const std::string& body);

class CannedHttpServer {
 public:
  explicit CannedHttpServer(Script script);
  // Several connections in turn: the i-th gets scripts[min(i, size - 1)].
  explicit CannedHttpServer(std::vector<Script> scripts);
  ~CannedHttpServer();

  std::uint16_t port() const { return port_; }
  // The request headers received so far, one per connection.
  std::vector<std::string> requests() const;

  struct Session;

 private:
  void Accept();

  boost::asio::io_context io_;
  boost::asio::ip::tcp::acceptor acceptor_;
  std::vector<Script> scripts_;
  std::size_t accepted_ = 0;
  std::vector<std::shared_ptr<Session>> stalled_;  // the server thread's only
  std::uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::vector<std::string> requests_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace phub::ctl::fixture
