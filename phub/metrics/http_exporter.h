// Serves a Registry over HTTP for Prometheus to scrape: GET /metrics answers the text format;
// GET / a pointer to it; other paths 404, other methods 405. One request per connection (the
// answer says Connection: close): scrapes come every few seconds, so keep-alive buys nothing
// and a connection never lingers between them.
//
// Anyone who can reach the port can talk to it, so it is bounded like phubd's other ports: at
// most `max_connections` at once (more are closed at accept), a request's header at most
// `max_header_bytes` and no body, and `request_timeout_ms` for the whole exchange (a client
// that is slow to send or to read is closed). It reads nothing else and changes nothing.
//
// Runs on the io_context it is given (phubd: the control plane's thread, so the Registry's
// callbacks may read the control plane's state). Create, use and destroy it on that thread, or
// before the thread runs.
#pragma once

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <map>
#include <string>

#include "phub/common/pending_connections.h"
#include "phub/common/status.h"
#include "phub/metrics/registry.h"

namespace phub::transport {
class SocketListener;
}

namespace phub::metrics {

struct ExporterOptions {
  std::string address = "0.0.0.0";
  std::uint16_t port = 0;  // 0: any free port (read it back with port())
  // Connections being served, all addresses together; at the limit the oldest is closed for the
  // newest (pending_connections.h), so idle connections cannot keep a scrape out.
  std::uint32_t max_connections = 64;
  std::uint32_t max_per_source = 4;  // from one address (a Prometheus scrapes one at a time)
  std::uint32_t max_header_bytes = 8192;
  int request_timeout_ms = 2000;  // a scrape sends its request at once
};

class HttpExporter {
 public:
  // Binds now: an error (port in use, bad address) names the address and the flag to change.
  // `registry` must outlive the exporter.
  static StatusOr<std::unique_ptr<HttpExporter>> Start(boost::asio::io_context& context,
                                                       const Registry& registry,
                                                       const ExporterOptions& options);
  ~HttpExporter();

  std::uint16_t port() const;
  // Stops accepting and closes the connections being served.
  void Stop();

  class Session;  // one connection (http_exporter.cc)

 private:
  HttpExporter(const Registry& registry, const ExporterOptions& options);

  const Registry& registry_;
  ExporterOptions options_;
  std::unique_ptr<transport::SocketListener> listener_;
  std::map<std::uint64_t, std::shared_ptr<Session>> sessions_;  // by id: oldest first
  PendingConnections pending_;
  std::uint64_t next_id_ = 0;
  std::uint64_t refused_ = 0;  // connections closed at accept: their address at its quota
  std::uint64_t evicted_ = 0;  // the oldest, closed for a newer one
};

}  // namespace phub::metrics
