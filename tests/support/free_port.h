// A TCP port on 127.0.0.1 that was free a moment ago: for a test whose server must listen on
// a port its clients know beforehand (a rendezvous' tcp://127.0.0.1:PORT, a racks file).
//
// Picked at random from the 16k ports just below the kernel's ephemeral range
// (ip_local_port_range), and checked free by binding it. Not from that range (bind to port 0):
// ctest runs tests side by side and every outgoing connection takes its local port from there,
// so a port the kernel had just handed out was sometimes taken again by some connection before
// the server listened on it (CI failed so: "cannot listen on 127.0.0.1:41455: Address already in
// use"). Below the range only another test's pick can collide, one in ~16k.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <fstream>
#include <random>

namespace phub::testing {

inline std::uint16_t FreeLoopbackPort() {
  namespace ip = boost::asio::ip;
  boost::asio::io_context context;
  const ip::address loopback = ip::make_address("127.0.0.1");
  std::uint32_t ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  if (ephemeral_low > 2048) {
    thread_local std::mt19937 random{std::random_device{}()};
    std::uniform_int_distribution<std::uint32_t> pick(
        ephemeral_low > 16384 + 1024 ? ephemeral_low - 16384 : 1024, ephemeral_low - 1);
    for (int attempt = 0; attempt < 100; ++attempt) {
      const auto port = static_cast<std::uint16_t>(pick(random));
      ip::tcp::acceptor probe(context);
      boost::system::error_code error;
      probe.open(ip::tcp::v4(), error);
      if (!error) probe.bind(ip::tcp::endpoint(loopback, port), error);
      if (!error) return port;  // no SO_REUSEADDR: a port in TIME_WAIT is not taken either
    }
  }
  ip::tcp::acceptor acceptor(context, ip::tcp::endpoint(loopback, 0));
  return acceptor.local_endpoint().port();
}

}  // namespace phub::testing
