// phubd's own series (docs/operations.md "Metrics"): what each server core counts on its data
// path, registered once per core. The control plane registers the job's series itself
// (ControlPlane::AddMetrics), as callbacks over the state it owns.
#pragma once

#include "phub/keys/key_table.h"
#include "phub/metrics/registry.h"

namespace phub::server {

// One core's series. The core's thread is the only writer (metric_types.h: lock-free, each
// on cache lines of its own); the exporter reads them at a scrape.
struct CoreMetrics {
  metrics::Counter* received_bytes = nullptr;  // payload bytes in: pushes and initial weights
  metrics::Counter* sent_bytes = nullptr;      // payload bytes of weights out
  metrics::Counter* pushes = nullptr;          // gradient pushes (one chunk of one worker)
  metrics::Counter* aggregations = nullptr;    // chunk-iterations summed and stepped
  metrics::Gauge* chunks = nullptr;            // chunks owned in the running job
  metrics::Histogram* aggregation_seconds = nullptr;  // one chunk's fused sum + optimizer pass
  // The time the core took to aggregate as many chunks as it owns: one iteration on this core.
  metrics::Histogram* round_seconds = nullptr;
  // Data connections whose incoming packets the kernel handled on the core's own CPU, and on
  // another (TCP, sampled once a connection is a few seconds old): whether the NIC's queues
  // are steered to the core that serves them (deploy/pbox/tune-nics.sh).
  metrics::Counter* rx_on_core = nullptr;
  metrics::Counter* rx_elsewhere = nullptr;
};

CoreMetrics AddCoreMetrics(metrics::Registry& registry, keys::CoreIndex core);

// phub_build_info{version, protocol} 1, and the process_* series.
void AddDaemonMetrics(metrics::Registry& registry);

}  // namespace phub::server
