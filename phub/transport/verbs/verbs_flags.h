// The flags that pick the RDMA device, declared once for every program that takes them (phubd,
// phub-worker, the test worker), so they mean the same everywhere (docs/operations.md).
#pragma once

#include <CLI/CLI.hpp>

#include "phub/transport/verbs/verbs_device.h"

namespace phub::transport::verbs {

// Adds --rdma-device, --rdma-port and --rdma-gid-index, writing `options`.
inline void AddRdmaFlags(CLI::App& app, DeviceOptions& options) {
  app.add_option("--rdma-device", options.device,
                 "RDMA device for --transport verbs (ibv_devices lists them); default: the first");
  app.add_option("--rdma-port", options.port, "Port of the RDMA device (1-based)")
      ->capture_default_str();
  app.add_option("--rdma-gid-index", options.gid_index,
                 "GID table index (show_gids); default: the IPv4-mapped RoCE v2 GID on Ethernet, "
                 "0 on InfiniBand");
}

}  // namespace phub::transport::verbs
