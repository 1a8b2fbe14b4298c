// Accepts TCP connections on one address:port (port 0: the kernel picks one, read back with
// port()) and hands each tuned socket to a callback on the listener's io_context thread.
// accept() failures never stop it: out of descriptors (EMFILE/ENFILE) or memory it pauses
// 200 ms between tries and logs once per 10 s, so a descriptor storm costs neither a spinning
// core nor a flooded log.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

#include "phub/common/log_limiter.h"
#include "phub/common/status.h"
#include "phub/transport/socket_options.h"

namespace phub::transport {

class SocketListener {
 public:
  using OnAccept = std::function<void(boost::asio::ip::tcp::socket)>;

  // Binds and listens now (so errors surface here, e.g. port in use); accepting starts with
  // Start(). Must be created, started and destroyed on the context's thread, or before that
  // thread runs.
  static StatusOr<std::unique_ptr<SocketListener>> Bind(boost::asio::io_context& context,
                                                     const std::string& address,
                                                     std::uint16_t port,
                                                     const SocketTuning& tuning = {});
  void Start(OnAccept on_accept);
  void Stop();
  std::uint16_t port() const { return port_; }

 private:
  explicit SocketListener(boost::asio::io_context& context) : acceptor_(context), backoff_(context) {}
  void AcceptNext();
  void OnAcceptError(const boost::system::error_code& ec);

  boost::asio::ip::tcp::acceptor acceptor_;
  OnAccept on_accept_;
  std::uint16_t port_ = 0;
  SocketTuning tuning_;
  boost::asio::steady_timer backoff_;  // pause after EMFILE/ENFILE/ENOBUFS/ENOMEM
  LogLimiter drop_log_;  // connections dropped at accept (a peer gone before its options)
  std::uint64_t accept_failures_ = 0;  // since the last log line about them
  std::chrono::steady_clock::time_point last_accept_log_{};
};

}  // namespace phub::transport
