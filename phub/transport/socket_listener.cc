#include "phub/transport/socket_listener.h"

#include "absl/strings/str_cat.h"
#include "phub/transport/socket_options.h"
#include "spdlog/spdlog.h"

namespace phub::transport {

namespace asio = boost::asio;
using asio::ip::tcp;

StatusOr<std::unique_ptr<SocketListener>> SocketListener::Bind(asio::io_context& context,
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
  std::unique_ptr<SocketListener> listener(new SocketListener(context));
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

void SocketListener::Start(OnAccept on_accept) {
  on_accept_ = std::move(on_accept);
  AcceptNext();
}

void SocketListener::Stop() {
  boost::system::error_code ignored;
  acceptor_.close(ignored);
  backoff_.cancel();
}

namespace {
// Out of descriptors or kernel memory: accept() fails at once until something is freed, so
// retrying straight away spins a core and floods the log. Pause this long between tries.
constexpr std::chrono::milliseconds kAcceptBackoff{200};
constexpr std::chrono::seconds kAcceptLogInterval{10};

bool IsResourceShortage(const boost::system::error_code& ec) {
  return ec == asio::error::no_descriptors || ec == asio::error::no_buffer_space ||
         ec == asio::error::no_memory ||
         ec == boost::system::error_code(ENFILE, boost::system::system_category());
}
}  // namespace

void SocketListener::AcceptNext() {
  acceptor_.async_accept([this](const boost::system::error_code& ec, tcp::socket socket) {
    if (ec == asio::error::operation_aborted || !acceptor_.is_open()) return;
    if (ec) return OnAcceptError(ec);
    if (Status s = TuneSocket(socket, tuning_); !s.ok()) {
      if (auto suppressed = drop_log_.Allow()) {
        spdlog::warn("dropping a connection on port {}: {}{}", port_, s.message(),
                     LogLimiter::Note(*suppressed));
      }
    } else {
      on_accept_(std::move(socket));
    }
    AcceptNext();
  });
}

void SocketListener::OnAcceptError(const boost::system::error_code& ec) {
  // The daemon must not die of a busy moment, nor spin through it: count, log once per
  // interval, and for a shortage of descriptors or memory pause before trying again.
  ++accept_failures_;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_accept_log_ >= kAcceptLogInterval) {
    spdlog::warn("accept on port {} failed {} time(s) in the last {} s, last: {}{}", port_,
                 accept_failures_, kAcceptLogInterval.count(), ec.message(),
                 IsResourceShortage(ec)
                     ? "; pausing between tries: raise the descriptor limit (ulimit -n, "
                       "LimitNOFILE=) or lower --max-connections"
                     : "");
    accept_failures_ = 0;
    last_accept_log_ = now;
  }
  // A peer that reset before accept is gone already: go on at once. Anything else pauses, so
  // no error accept() keeps returning can spin the loop.
  if (ec == asio::error::connection_aborted) return AcceptNext();
  backoff_.expires_after(kAcceptBackoff);
  backoff_.async_wait([this](const boost::system::error_code& wait_ec) {
    if (wait_ec || !acceptor_.is_open()) return;
    AcceptNext();
  });
}

}  // namespace phub::transport
