#include "phub/transport/socket_options.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <boost/asio/connect.hpp>
#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/transport/poll_until.h"

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
  if (tuning.notsent_lowat_bytes > 0) {
    const int lowat = tuning.notsent_lowat_bytes;
    if (::setsockopt(socket.native_handle(), IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat,
                     sizeof lowat) != 0) {
      return absl::InternalError(
          absl::StrCat("setsockopt(TCP_NOTSENT_LOWAT): ", std::strerror(errno)));
    }
  }
  if (tuning.busy_poll_us > 0) {
    const int us = tuning.busy_poll_us;
    if (::setsockopt(socket.native_handle(), SOL_SOCKET, SO_BUSY_POLL, &us, sizeof us) != 0) {
      return absl::PermissionDeniedError(absl::StrCat(
          "setsockopt(SO_BUSY_POLL, ", us, " us): ", std::strerror(errno),
          "; above sysctl net.core.busy_read it needs CAP_NET_ADMIN (or raise that sysctl)"));
    }
  }
  return absl::OkStatus();
}

SocketTuning ForScheduling(SocketTuning tuning, std::size_t window_bytes) {
  // 256 KiB unsent keeps a 10 Gbit/s link busy for 200 us while the event loop hands over the
  // next chunk, yet is a quarter of a default chunk: a chunk queued later waits behind at
  // most this much in the kernel (plus what the window itself lets out).
  constexpr int kNotsentLowatBytes = 256 * 1024;
  tuning.notsent_lowat_bytes = window_bytes > 0 ? kNotsentLowatBytes : 0;
  return tuning;
}

namespace {

// connect(2) that gives up at `deadline` (a blocking one waits for the kernel's SYN retries,
// about 2 minutes, when nothing answers: a cut link, a firewall that drops). Leaves `socket`
// blocking again on success. timed_out when the deadline came first.
void ConnectBefore(tcp::socket& socket, const tcp::endpoint& endpoint,
                   std::chrono::steady_clock::time_point deadline,
                   boost::system::error_code& ec) {
  if (!socket.is_open()) {
    socket.open(endpoint.protocol(), ec);
    if (ec) return;
  }
  socket.non_blocking(true, ec);
  if (ec) return;
  // connect(2) itself: asio's synchronous connect polls without a bound even on a
  // non-blocking socket.
  int result = 0;
  do {
    result = ::connect(socket.native_handle(), endpoint.data(),
                       static_cast<socklen_t>(endpoint.size()));
  } while (result != 0 && errno == EINTR);
  if (result != 0 && errno != EINPROGRESS) {
    ec = boost::system::error_code(errno, boost::system::system_category());
    return;
  }
  if (result != 0) {
    StatusOr<bool> ready = PollUntil(socket.native_handle(), POLLOUT, deadline, "connect");
    if (!ready.ok()) {
      ec = boost::system::errc::make_error_code(boost::system::errc::io_error);
      return;
    }
    if (!*ready) {
      ec = asio::error::timed_out;
      return;
    }
    int error = 0;
    socklen_t length = sizeof error;
    if (::getsockopt(socket.native_handle(), SOL_SOCKET, SO_ERROR, &error, &length) != 0) {
      error = errno;
    }
    if (error != 0) ec = boost::system::error_code(error, boost::system::system_category());
  }
  if (ec) return;
  socket.non_blocking(false, ec);
}

}  // namespace

StatusOr<tcp::socket> ConnectWithRetry(asio::io_context& context, const std::string& host,
                                       std::uint16_t port, int timeout_ms,
                                       const SocketTuning& tuning,
                                       const std::string& local_address) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  tcp::resolver resolver(context);
  boost::system::error_code ec;
  auto endpoints = resolver.resolve(host, std::to_string(port), ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot resolve '", host, "': ", ec.message(), "; check the host name"));
  }
  std::optional<tcp::endpoint> local;
  if (!local_address.empty()) {
    auto ip = asio::ip::make_address(local_address, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("local address '", local_address,
                                                     "' is not an IP address: ", ec.message()));
    }
    local.emplace(ip, 0);
  }
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    tcp::socket socket(context);
    if (local) {
      // Bound before connecting: the source address picks the NIC the connection leaves by.
      socket.open(local->protocol(), ec);
      if (!ec) socket.bind(*local, ec);
      if (ec) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cannot send from ", local_address, ": ", ec.message(),
            "; is it an address of one of this host's NICs?"));
      }
    }
    ec = asio::error::host_not_found;
    for (const auto& entry : endpoints) {
      // A failed attempt leaves the socket unusable: a fresh one for the next address (bound
      // again when a local address is given).
      if (ec != asio::error::host_not_found && !local) {
        boost::system::error_code ignored;
        socket.close(ignored);
      }
      ConnectBefore(socket, entry.endpoint(), deadline, ec);
      if (!ec || ec == asio::error::timed_out) break;
    }
    if (!ec) {
      PHUB_RETURN_IF_ERROR(TuneSocket(socket, tuning));
      return socket;
    }
    if (ec == asio::error::timed_out || std::chrono::steady_clock::now() + backoff > deadline) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", host, ":", port, ": ",
                                                 ec.message(), " (gave up after ", timeout_ms,
                                                 " ms); is phubd running there?"));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

}  // namespace phub::transport
