#include "phub/transport/socket_options.h"

#include <boost/asio/connect.hpp>
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"

namespace phub::transport {

namespace asio = boost::asio;
using asio::ip::tcp;

Status TuneSocket(tcp::socket& socket, const SocketTuning& tuning) {
  const int buffer_bytes = tuning.buffer_bytes;
  boost::system::error_code ec;
  socket.set_option(tcp::no_delay(tuning.no_delay), ec);
  if (ec) return absl::InternalError(absl::StrCat("setsockopt(TCP_NODELAY): ", ec.message()));
  if (buffer_bytes > 0) {
    socket.set_option(asio::socket_base::send_buffer_size(buffer_bytes), ec);
    if (!ec) socket.set_option(asio::socket_base::receive_buffer_size(buffer_bytes), ec);
    if (ec) return absl::InternalError(absl::StrCat("setsockopt(SO_SNDBUF/SO_RCVBUF): ", ec.message()));
  }
  return absl::OkStatus();
}

StatusOr<tcp::socket> ConnectWithRetry(asio::io_context& context, const std::string& host,
                                       std::uint16_t port, int timeout_ms,
                                       const SocketTuning& tuning) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  tcp::resolver resolver(context);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "': ", ec.message(), "; check the host name"));
  }
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    tcp::socket socket(context);
    asio::connect(socket, endpoints, ec);
    if (!ec) {
      PHUB_RETURN_IF_ERROR(TuneSocket(socket, tuning));
      return socket;
    }
    if (std::chrono::steady_clock::now() + backoff > deadline) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":", port, ": ",
                                                 ec.message(), " (gave up after ", timeout_ms,
                                                 " ms); is phubd running there?"));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace phub::transport
