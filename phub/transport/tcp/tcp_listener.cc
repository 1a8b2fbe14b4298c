#include "phub/transport/tcp/tcp_listener.h"

#include "absl/strings/str_cat.h"
#include "phub/transport/tcp/socket_options.h"
#include "spdlog/spdlog.h"

namespace phub::transport::tcp {

namespace asio = boost::asio;
using asio::ip::tcp;

StatusOr<std::unique_ptr<TcpListener>> TcpListener::Bind(asio::io_context& context,
                                                         const std::string& address,
                                                         std::uint16_t port,
                                                         const SocketTuning& tuning) {
  boost::system::error_code ec;
  auto ip = asio::ip::make_address(address, ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat("listen address '", address,
                                                   "' is not an IP address (", ec.message(),
                                                   "); use e.g. 0.0.0.0 or 127.0.0.1"));
  }
  std::unique_ptr<TcpListener> listener(new TcpListener(context));
  tcp::endpoint endpoint(ip, port);
  listener->acceptor_.open(endpoint.protocol(), ec);
  if (!ec) listener->acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) listener->acceptor_.bind(endpoint, ec);
  if (!ec) listener->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address, ":", port, ": ",
                                               ec.message(),
                                               "; pick a free port or stop the other process"));
  }
  listener->port_ = listener->acceptor_.local_endpoint().port();
  listener->tuning_ = tuning;
  return listener;
}

void TcpListener::Start(OnAccept on_accept) {
  on_accept_ = std::move(on_accept);
  AcceptNext();
}

void TcpListener::Stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
}

void TcpListener::AcceptNext() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) {
      // EMFILE and friends: log and keep accepting; the daemon must not die of a busy moment.
      spdlog::warn("accept on port {} failed: {}", port_, ec.message());
    } else if (Status s = TuneSocket(socket, tuning_); !s.ok()) {
      spdlog::warn("dropping a connection on port {}: {}", port_, s.message());
    } else {
      on_accept_(std::move(socket));
    }
    AcceptNext();
  });
}

}  // namespace phub::transport::tcp
