#include "tests/phub/ctl/canned_http_server.h"

#include <boost/asio/read_until.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/streambuf.hpp>
#include <boost/asio/write.hpp>

namespace phub::ctl::fixture {

namespace net = boost::asio;
using tcp = net::ip::tcp;
using error_code = boost::system::error_code;

std::string HttpResponse(const std::string& status, const std::string& body) {
  return "HTTP/1.1 " + status +
         "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

struct CannedHttpServer::Session : std::enable_shared_from_this<Session> {
  Session(tcp::socket s, Script sc, CannedHttpServer* server)
      : socket(std::move(s)), script(std::move(sc)), timer(socket.get_executor()), owner(server) {}

  void Start() {
    net::async_read_until(socket, request, "\r\n\r\n",
                          [self = shared_from_this()](error_code ec, std::size_t n) {
                            if (ec) return;
                            self->OnRequest(n);
                          });
  }

  void OnRequest(std::size_t n) {
    {
      std::lock_guard lock(owner->mu_);
      owner->requests_.emplace_back(net::buffers_begin(request.data()),
                                    net::buffers_begin(request.data()) + n);
    }
    switch (script.mode) {
      case Script::Mode::kRespond:
        net::async_write(socket, net::buffer(script.bytes),
                         [self = shared_from_this()](error_code, std::size_t) {
                           error_code ignored;
                           self->socket.shutdown(tcp::socket::shutdown_both, ignored);
                           self->socket.close(ignored);
                         });
        break;
      case Script::Mode::kStall:
        // Held by the server until it stops: the client sees an open, silent connection.
        owner->stalled_.push_back(shared_from_this());
        break;
      case Script::Mode::kDrip:
        net::async_write(socket, net::buffer(script.bytes),
                         [self = shared_from_this()](error_code ec, std::size_t) {
                           if (!ec) self->Drip();
                         });
        break;
      case Script::Mode::kHangUp: {
        error_code ignored;
        socket.close(ignored);
        break;
      }
    }
  }

  void Drip() {
    timer.expires_after(std::chrono::milliseconds(50));
    timer.async_wait([self = shared_from_this()](error_code ec) {
      if (ec) return;
      net::async_write(self->socket, net::buffer("x", 1), [self](error_code e, std::size_t) {
        if (!e) self->Drip();
      });
    });
  }

  tcp::socket socket;
  Script script;
  net::streambuf request{64 * 1024};
  net::steady_timer timer;
  CannedHttpServer* owner;
};

CannedHttpServer::CannedHttpServer(Script script)
    : CannedHttpServer(std::vector<Script>{std::move(script)}) {}

CannedHttpServer::CannedHttpServer(std::vector<Script> scripts)
    : acceptor_(io_, tcp::endpoint(net::ip::make_address("127.0.0.1"), 0)),
      scripts_(std::move(scripts)) {
  port_ = acceptor_.local_endpoint().port();
  Accept();
  thread_ = std::thread([this] { io_.run(); });
}

CannedHttpServer::~CannedHttpServer() {
  io_.stop();
  thread_.join();
}

void CannedHttpServer::Accept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (ec) return;
    const Script& script = scripts_[std::min(accepted_, scripts_.size() - 1)];
    ++accepted_;
    std::make_shared<Session>(std::move(socket), script, this)->Start();
    Accept();
  });
}

std::vector<std::string> CannedHttpServer::requests() const {
  std::lock_guard lock(mu_);
  return requests_;
}

}  // namespace phub::ctl::fixture
