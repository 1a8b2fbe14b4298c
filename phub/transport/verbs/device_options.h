// Which RDMA device, port and GID a process uses: plain data, so that option structs (phubd's,
// PsClient's, the ring's) can carry it without pulling in <infiniband/verbs.h>.
#pragma once

#include <string>

namespace phub::transport::verbs {

struct DeviceOptions {
  std::string device;   // ibv_get_device_name(); empty: the first device
  int port = 1;         // physical port number (1-based)
  int gid_index = -1;   // -1: the IPv4-mapped RoCE v2 GID on Ethernet ports, 0 on InfiniBand
};

}  // namespace phub::transport::verbs
