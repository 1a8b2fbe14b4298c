// A minimal HTTP/1.1 GET client (Boost.Beast) for reading phubd's /metrics: one request per
// connection, one deadline over all of it, a bounded response.
//
// The peer is untrusted: the deadline covers connecting, sending and reading (a server that
// accepts and says nothing, or drips a byte a second, ends in DeadlineExceeded at the deadline);
// the headers and the body are refused past their limits before their bytes are held (a
// Content-Length over the limit is refused as soon as the header arrives).
//
// Thread-safety: HttpGet may be called from several threads at once; each call has its own
// io_context. It blocks the calling thread until the response or the deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

#include "phub/common/status.h"

namespace phub::ctl {

struct HostPort {
  std::string host;  // a name, an IPv4 address, or an IPv6 address without brackets
  std::string port;  // decimal, 1..65535
  // "host:port", with brackets around an IPv6 address.
  std::string ToString() const;
};

// "HOST:PORT" or "[IPV6]:PORT". InvalidArgument naming the text and the expected form.
StatusOr<HostPort> ParseHostPort(std::string_view text);

struct HttpGetOptions {
  // Everything together: resolving, connecting, sending the request, reading the response.
  std::chrono::milliseconds timeout{3000};
  std::size_t max_body_bytes = 16 << 20;
  std::size_t max_header_bytes = 64 << 10;
};

// The body of a 200 response to GET `target` (e.g. "/metrics") from `where`. Errors name the
// URL and what happened:
//   NotFound           the host name does not resolve;
//   Unavailable        the connection is refused or reset, or the peer closed it before a
//                      whole response;
//   DeadlineExceeded   no whole response within options.timeout;
//   ResourceExhausted  the headers or the body are over their limit;
//   FailedPrecondition the peer does not speak HTTP, or answered with another status (named).
// A host name is resolved on a helper thread that is abandoned if it outlives the deadline
// (getaddrinfo cannot be interrupted); addresses are not resolved at all.
StatusOr<std::string> HttpGet(const HostPort& where, std::string_view target,
                              const HttpGetOptions& options = {});

}  // namespace phub::ctl
