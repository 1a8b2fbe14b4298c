// Every knob of phubd, declared once: phubd_main.cc binds each to a CLI11 flag with its help
// text, docs/operations.md lists them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "phub/kernels/aggregate_and_step.h"
#include "phub/topology/topology.h"
#include "phub/transport/send_window.h"
#include "phub/transport/socket_options.h"
#include "phub/transport/transport_kind.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::server {

// Chunk size used when --chunk-bytes is not given; chosen by measurement (docs/design.md).
inline constexpr std::uint64_t kDefaultChunkBytes = 1024 * 1024;

// Bounds on what any peer can make phubd allocate or hold, and for how long. Every refusal is
// an Error naming the limit and its flag (docs/operations.md "Limits"). The defaults fit a PS
// box serving jobs of up to a few hundred workers and models of up to ~100k tensors.
struct ServerLimits {
  std::uint32_t max_control_frame_bytes = 4u << 20;  // one control message (a Hello)
  std::uint32_t max_tensors = 100000;                 // tensors in one job's table
  // Model bytes one job may ask for, with kChunkBookkeepingBytes counted per chunk; 0 until
  // phubd_main derives it from the machine's memory (DefaultMaxModelBytes).
  std::uint64_t max_model_bytes = 0;
  // Open control connections; per core, data connections that have not attached yet.
  std::uint32_t max_connections = 1024;
  // Jobs forming or running at once (docs/operations.md "Sharing a PBox").
  std::uint32_t max_jobs = 16;
  // What all jobs together may hold: each job is charged its model times (world size + 3) (a
  // slot per worker, the weights, up to two optimizer state arrays) from its first Hello to its
  // end; a job that would pass it is refused. 0 until phubd_main derives it (80 % of memory).
  std::uint64_t memory_budget_bytes = 0;
  int hello_timeout_ms = 10000;        // a control connection must send its Hello by then
  // A data connection must ATTACH by then; and every member must be attached to every core
  // this long after the job's Welcome, or the job stalls.
  int attach_timeout_ms = 10000;
  int form_timeout_ms = 300000;        // a job must have all its workers this long after the first
  int stalled_job_timeout_ms = 30000;  // a stalled job's members still connected are then closed
  int leave_timeout_ms = 300000;  // after a member's Goodbye, the others must have left by then
  // A member lost mid-job may say Hello again (same rank) this long; 0: the job stalls at once.
  int rejoin_timeout_ms = 60000;
  // A member of a running job heard from (any message, Heartbeats every quarter of it) less
  // recently than this is lost; 0: no heartbeats. Workers apply phubd's value to phubd.
  int liveness_timeout_ms = 10000;
};

// Checkpoints of the running job (docs/operations.md "Checkpoints").
struct CheckpointOptions {
  std::string dir;              // --checkpoint-dir; empty: none
  std::uint64_t every = 0;      // --checkpoint-every K iterations; 0: only on SIGTERM
  std::string resume_dir;       // --resume D: the first job resumes from D's newest good one
};

// The Prometheus endpoint (docs/operations.md "Metrics").
struct MetricsOptions {
  int port = -1;          // --metrics-port; -1: no endpoint, 0: any free port (see port_file)
  std::string address;    // --metrics-address; empty: --listen's
  std::string port_file;  // --metrics-port-file: the port written there once listening
};

// A PBox's NICs (docs/operations.md "A PBox's NICs"; nic_plan.h).
struct NicOptions {
  // --nics: the data plane's NICs, as interfaces ("eth0") or addresses; each core listens on
  // one of them. Empty: one NIC, --listen (or one per --rdma-device listed).
  std::vector<std::string> names;
  std::string core_map;     // --core-map P@N,...: server core i on physical core P, NIC N
  std::string machine_xml;  // --machine-xml: hwloc XML of the box; empty: this machine
};

struct ServerOptions {
  std::string listen_address = "0.0.0.0";
  std::uint16_t port = 7070;            // control plane; 0 = any free port (see port_file)
  std::string port_file;                // where to write the control port once listening
  std::uint16_t data_port_base = 0;     // core i listens on base+i; 0 = any free port
  std::uint32_t cores = 1;              // shards, one pinned thread each
  bool pin = true;
  int first_core = 0;                   // core i is pinned to physical core first_core+i
  // Jobs name their own world size (Hello); nonzero: the largest phubd accepts.
  std::uint32_t world_size = 0;
  std::uint64_t chunk_bytes = kDefaultChunkBytes;
  kernels::OptimizerConfig optimizer;
  std::string job_token;                // contents of --token-file; empty = no token
  // --job-tokens DIR: job NAME's token is the contents of DIR/NAME, read at each first Hello
  // (job_tokens.h); a job without a file there is refused. Overrides job_token when set.
  std::string job_tokens_dir;
  // --job-weight NAME=W: the job's share of every core's sends (weighted fair queueing,
  // fair_send_queue.h); jobs not named weigh 1.
  std::map<std::string, double> job_weights;
  std::string initial_weights_path;     // raw float32 file; empty = rank 0 sends weights
  bool one_job = false;                 // exit after the first job ends
  transport::SocketTuning tcp;     // TCP_NODELAY and socket buffers of every connection
  // Priority scheduling of the WEIGHTS each core sends (--send-window-bytes, SendScheduler).
  std::size_t send_window_bytes = transport::kDefaultSendWindowBytes;
  // --nic-gbps: what phubd's sends may use of its NIC(s), all cores together, in bytes/s; the
  // cores pace the jobs' sends to it while they share (fair_send_queue.h). 0: not paced.
  double nic_bytes_per_s = 0;
  transport::TransportKind transport = transport::TransportKind::kTcp;  // the data plane
  // Device, port and GID for --transport verbs; `device` may list one device per NIC.
  transport::verbs::DeviceOptions rdma;
  NicOptions nics;
  ServerLimits limits;                  // what a peer may make phubd hold, and for how long
  CheckpointOptions checkpoint;
  MetricsOptions metrics;
  // Racks of racks (--topology FILE --rack NAME, docs/operations.md "Racks of racks"): the
  // cluster's racks and which of them this phubd serves; null: jobs of one rack only.
  std::shared_ptr<const topology::Topology> topology;
  std::uint32_t rack = 0;
};

}  // namespace phub::server
