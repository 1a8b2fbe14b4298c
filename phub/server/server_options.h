// Every knob of phubd, declared once: phubd_main.cc binds each to a CLI11 flag with its help
// text, docs/operations.md lists them.
#pragma once

#include <cstdint>
#include <string>

#include "phub/kernels/aggregate_and_step.h"
#include "phub/transport/tcp/socket_options.h"
#include "phub/transport/transport_kind.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::server {

// Chunk size used when --chunk-bytes is not given; chosen by measurement (docs/design.md).
inline constexpr std::uint64_t kDefaultChunkBytes = 1024 * 1024;

struct ServerOptions {
  std::string listen_address = "0.0.0.0";
  std::uint16_t port = 7070;            // control plane; 0 = any free port (see port_file)
  std::string port_file;                // where to write the control port once listening
  std::uint16_t data_port_base = 0;     // core i listens on base+i; 0 = any free port
  std::uint32_t cores = 1;              // shards, one pinned thread each
  bool pin = true;
  int first_core = 0;                   // core i is pinned to physical core first_core+i
  std::uint32_t world_size = 1;
  std::uint64_t chunk_bytes = kDefaultChunkBytes;
  kernels::OptimizerConfig optimizer;
  std::string job_token;                // contents of --token-file; empty = no token
  std::string initial_weights_path;     // raw float32 file; empty = rank 0 sends weights
  bool one_job = false;                 // exit after the first job ends
  transport::tcp::SocketTuning tcp;     // TCP_NODELAY and socket buffers of every connection
  transport::TransportKind transport = transport::TransportKind::kTcp;  // the data plane
  transport::verbs::DeviceOptions rdma; // device, port and GID for --transport verbs
};

}  // namespace phub::server
