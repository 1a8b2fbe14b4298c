// The one place a transport is chosen: everything above works with the Device it returns
// (transport.h) and never names TCP, verbs or shm again.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/transport/socket_options.h"
#include "phub/transport/transport.h"
#include "phub/transport/transport_kind.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::transport {

struct TransportOptions {
  TransportKind kind = TransportKind::kTcp;
  SocketTuning tuning;          // every TCP socket: TCP's data connections, verbs' side channels
  verbs::DeviceOptions rdma;    // kVerbs: device, port and GID
};

// kTcp and kShm always succeed (shm's errors come at Dial and Listen); kVerbs opens the RDMA device (an error says which device and why).
StatusOr<std::shared_ptr<Device>> OpenDevice(const TransportOptions& options);

// A Device per NIC of a box with several (phubd's and a worker's --nics): `rdma_devices[k]` is
// NIC k's RDMA device ("" : options.rdma's default). NICs on the same RDMA device share one
// Device (one protection domain: memory registered once serves them all), and on TCP every NIC
// shares one (the address a connection uses picks its NIC).
StatusOr<std::vector<std::shared_ptr<Device>>> OpenDevicePerNic(
    const TransportOptions& options, const std::vector<std::string>& rdma_devices);

}  // namespace phub::transport
