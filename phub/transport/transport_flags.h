// The data-plane flags, declared once for every program that takes them (phubd, phub-worker,
// the test and bench workers), so they mean the same everywhere (docs/operations.md).
#pragma once

#include <CLI/CLI.hpp>

#include "phub/transport/transport_kind.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::transport {

// Adds --transport tcp|verbs|shm, writing `kind`.
inline void AddTransportFlag(CLI::App& app, TransportKind& kind, const std::string& help) {
  app.add_option_function<std::string>(
         "--transport", [&kind](const std::string& name) { kind = *ParseTransportKind(name); },
         help)
      ->check(CLI::IsMember({"tcp", "verbs", "shm"}))
      ->default_str(TransportName(kind));
}

// Adds --send-window-bytes, writing `window_bytes` (SendScheduler: priority scheduling of
// each data connection's sends).
inline void AddSendWindowFlag(CLI::App& app, std::size_t& window_bytes) {
  app.add_option("--send-window-bytes", window_bytes,
                 "Priority scheduling: payload bytes each data connection may have in flight; "
                 "chunks held back go first-layer-first, so the gradients and weights the next "
                 "forward needs first overtake the later layers' (0 = off: send in order "
                 "queued)")
      ->capture_default_str()
      ->check(CLI::Range(std::size_t{0}, std::size_t{1} << 32));
}

// Adds --rdma-device, --rdma-port and --rdma-gid-index, writing every one of `options`.
inline void AddRdmaFlags(CLI::App& app, std::vector<verbs::DeviceOptions*> options) {
  app.add_option_function<std::string>(
      "--rdma-device",
      [options](const std::string& v) {
        for (auto* o : options) o->device = v;
      },
      "RDMA device for --transport verbs (ibv_devices lists them), or one per --nics entry, "
      "comma-separated; default: the first");
  app.add_option_function<int>(
         "--rdma-port",
         [options](int v) {
           for (auto* o : options) o->port = v;
         },
         "Port of the RDMA device (1-based)")
      ->default_str("1");
  app.add_option_function<int>(
      "--rdma-gid-index",
      [options](int v) {
        for (auto* o : options) o->gid_index = v;
      },
      "GID table index (show_gids); default: the IPv4-mapped RoCE v2 GID on Ethernet, 0 on "
      "InfiniBand");
}

}  // namespace phub::transport
