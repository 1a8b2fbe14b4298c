// What the server cores are given (core/): where they run and listen, the NICs they are placed
// on, the data plane they speak, and the limits each applies to its data connections. The
// flags behind them are bound in phubd_flags.cc (--help "Listening and cores", "NICs and
// placement", "RDMA and the data plane", "Experiment knobs").
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "phub/transport/send_window.h"
#include "phub/transport/socket_options.h"
#include "phub/transport/transport_kind.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::server {

// Where the server cores run and listen.
struct CoreOptions {
  std::string listen_address = "0.0.0.0";  // --listen: control and data (the default NIC)
  std::uint16_t data_port_base = 0;        // a job on core i: base+i+k*count; 0 = any free
  std::uint32_t count = 1;                 // --cores: shards, one pinned thread each
  bool pin = true;                         // not --no-pin
  int first_core = 0;                      // core i is pinned to physical core first_core+i
};

// A PBox's NICs (docs/operations.md "A PBox's NICs"; nic_plan.h).
struct NicOptions {
  // --nics: the data plane's NICs, as interfaces ("eth0") or addresses; each core listens on
  // one of them. Empty: one NIC, --listen (or one per --rdma-device listed).
  std::vector<std::string> names;
  std::string core_map;     // --core-map P@N,...: server core i on physical core P, NIC N
  std::string machine_xml;  // --machine-xml: hwloc XML of the box; empty: this machine
  // --nic-gbps: what phubd's sends may use of its NIC(s), all cores together, in bytes/s; the
  // cores pace the jobs' sends to it while they share (fair_send_queue.h). 0: not paced.
  double bytes_per_s = 0;
};

// The data plane every core and every job's connections speak.
struct DataPlaneOptions {
  transport::TransportKind transport = transport::TransportKind::kTcp;
  // Device, port and GID for --transport verbs; `device` may list one device per NIC.
  transport::verbs::DeviceOptions rdma;
  transport::SocketTuning tcp;  // TCP_NODELAY and socket buffers of every connection
  // Priority scheduling of the WEIGHTS each core sends (--send-window-bytes, SendScheduler).
  std::size_t send_window_bytes = transport::kDefaultSendWindowBytes;
};

// What a core holds its data connections to; the top fills it from the flags' homes
// (--max-connections, --attach-timeout-ms).
struct CoreLimits {
  std::uint32_t max_connections = 1024;  // data connections that have not attached yet
  // Of those, from one address (--max-data-pending-per-source): a worker host opens one per
  // worker to each core at once. Past max_connections the oldest gives way to the newest
  // (pending_connections.h's rule: a real worker attaches a round trip after connecting).
  std::uint32_t max_per_source = 64;
  int attach_timeout_ms = 10000;         // a data connection must ATTACH by then
};

}  // namespace phub::server
