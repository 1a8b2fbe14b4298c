// Socket settings every PHub TCP connection gets (data and control).
//
// TCP_NODELAY: a push is answered by its pull; with Nagle on, the small trailing segment of a
// message waits for the peer's delayed ACK (~40 ms on Linux loopback) and an iteration stalls.
// Buffer sizes: left to Linux's autotuning unless `buffer_bytes` > 0, because a fixed
// SO_SNDBUF/SO_RCVBUF switches autotuning off (measured in bench/exchange, docs/design.md).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <cstddef>

#include "phub/common/status.h"

namespace phub::transport {

// Per-socket settings. Defaults are what production uses; the other values exist so that
// bench/exchange can measure what each setting is worth (docs/design.md).
struct SocketTuning {
  bool no_delay = true;  // TCP_NODELAY
  int buffer_bytes = 0;  // SO_SNDBUF and SO_RCVBUF; 0 = leave Linux's autotuning on
  // TCP_NOTSENT_LOWAT: the kernel takes more bytes only while fewer than this are unsent, so
  // what a SendScheduler holds back is not already queued in the socket; 0 = unset (the send
  // buffer, up to megabytes, is one unpreemptable FIFO).
  int notsent_lowat_bytes = 0;
  // SO_BUSY_POLL: a read with nothing there polls the NIC's queue this many microseconds
  // before sleeping (lower latency, a busier core; docs/operations.md "A PBox's NICs"). 0: off.
  // Above net.core.busy_read it needs CAP_NET_ADMIN: refused then, said so.
  int busy_poll_us = 0;
};

// What a connection whose sends a SendScheduler with `window_bytes` orders needs of its socket.
SocketTuning ForScheduling(SocketTuning tuning, std::size_t window_bytes);

Status TuneSocket(boost::asio::ip::tcp::socket& socket, const SocketTuning& tuning = {});

// Connects to host:port, retrying refused connections until `timeout_ms` has passed (a worker
// may start before phubd is listening). Unavailable with the last error when it gives up. The
// whole call, each connect(2) included (one nothing answers would otherwise wait for the
// kernel's SYN retries), ends within `timeout_ms` (plus resolving the name).
// `local_address` (optional): the source address, so the connection leaves through that NIC.
StatusOr<boost::asio::ip::tcp::socket> ConnectWithRetry(boost::asio::io_context& context,
                                                        const std::string& host,
                                                        std::uint16_t port, int timeout_ms,
                                                        const SocketTuning& tuning = {},
                                                        const std::string& local_address = "");

}  // namespace phub::transport
