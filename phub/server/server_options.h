// Every knob of phubd, declared once, in the room that reads it, and composed here: each room's
// options struct is a member, grouped as `phubd --help` groups the flags (phubd_flags.cc binds
// each to its flag with its help text; docs/operations.md lists them). Lower rooms never see
// this struct, only their own part of it.
#pragma once

#include <cstdint>
#include <string>

#include "phub/common/pending_connections.h"
#include "phub/server/admission/admission_options.h"
#include "phub/server/core/core_options.h"
#include "phub/server/job/job_options.h"

namespace phub::server {

// What a peer may hold of the control plane before it is any job's member (--help "Limits and
// deadlines").
struct ControlLimits {
  std::uint32_t max_control_frame_bytes = 4u << 20;  // one control message (a Hello)
  // Open control connections; per core, data connections that have not attached yet; and,
  // without --max-world-size, the largest world size.
  std::uint32_t max_connections = 1024;
  // Control connections whose Hello is not yet accepted (--max-pending-per-source,
  // --max-pending-connections): at the total, the oldest gives way (pending_connections.h).
  PendingLimits pending{.per_source = 16, .total = 256};
  // A control connection must send its Hello by then. Short: a worker sends it one round trip
  // after connecting, and a peer that waits holds a pending connection meanwhile.
  int hello_timeout_ms = 3000;
};

// The Prometheus endpoint (--help "Metrics", docs/operations.md "Metrics").
struct MetricsOptions {
  int port = -1;          // --metrics-port; -1: no endpoint, 0: any free port (see port_file)
  std::string address;    // --metrics-address; empty: 127.0.0.1 (the series name every job)
  std::string port_file;  // --metrics-port-file: the port written there once listening
};

struct ServerOptions {
  // Listening and cores.
  std::uint16_t port = 7070;  // control plane; 0 = any free port (see port_file)
  std::string port_file;      // where to write the control port once listening
  bool one_job = false;       // exit after the first job ends
  CoreOptions cores;
  // Limits and deadlines: the control plane's here, a job's size in admission.limits, its
  // phases in jobs.deadlines.
  ControlLimits control;
  // Jobs' model and default optimizer, Sharing a PBox, Racks of racks.
  AdmissionOptions admission;
  JobOptions jobs;  // deadlines, checkpoints, initial weights
  MetricsOptions metrics;
  NicOptions nics;               // NICs and placement
  DataPlaneOptions data_plane;   // RDMA and the data plane; its TCP tuning is experiment knobs

  // What each core holds its data connections to: --max-connections, --attach-timeout-ms.
  CoreLimits core_limits() const {
    return {.max_connections = control.max_connections,
            .attach_timeout_ms = jobs.deadlines.attach_timeout_ms};
  }
};

}  // namespace phub::server
