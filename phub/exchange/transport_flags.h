// A worker's data-plane flags, declared once for phub-worker and the test worker: --transport
// (the ring's links; a PS job follows phubd's --transport) and the RDMA device flags, written
// into every exchange's options so ps, ps-colocated and ring use the same device.
#pragma once

#include <CLI/CLI.hpp>

#include "phub/exchange/make_exchange.h"

namespace phub::exchange {

inline void AddTransportFlags(CLI::App& app, ExchangeOptions& options) {
  app.add_option_function<std::string>(
         "--transport",
         [&options](const std::string& name) {
           options.ring.ring.transport = *transport::ParseTransportKind(name);
         },
         "Ring links: tcp or verbs (RDMA). PS jobs use what phubd was started with")
      ->check(CLI::IsMember({"tcp", "verbs"}))
      ->default_str("tcp");
  app.add_option_function<std::string>(
      "--rdma-device",
      [&options](const std::string& v) { options.ps.client.rdma.device = options.ring.ring.rdma.device = v; },
      "RDMA device for verbs (ibv_devices lists them); default: the first");
  app.add_option_function<int>(
      "--rdma-port",
      [&options](int v) { options.ps.client.rdma.port = options.ring.ring.rdma.port = v; },
      "Port of the RDMA device (1-based; default 1)");
  app.add_option_function<int>(
      "--rdma-gid-index",
      [&options](int v) { options.ps.client.rdma.gid_index = options.ring.ring.rdma.gid_index = v; },
      "GID table index (show_gids); default: the IPv4-mapped RoCE v2 GID on Ethernet, 0 on IB");
}

}  // namespace phub::exchange
