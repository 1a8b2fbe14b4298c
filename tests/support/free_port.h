// A TCP port on 127.0.0.1 that was free a moment ago: for a test whose server must listen on
// a port its clients know beforehand (a rendezvous' tcp://127.0.0.1:PORT). Another process may
// take it in between; the kernel hands ports out in turn, so that is rare.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>

namespace phub::testing {

inline std::uint16_t FreeLoopbackPort() {
  boost::asio::io_context context;
  boost::asio::ip::tcp::acceptor acceptor(
      context, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
  return acceptor.local_endpoint().port();
}

}  // namespace phub::testing
