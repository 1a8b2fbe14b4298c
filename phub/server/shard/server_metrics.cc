#include "phub/server/shard/server_metrics.h"

#include <string>

#include "phub/common/version.h"
#include "phub/metrics/process_metrics.h"

#ifndef PHUB_VERSION_STRING
#define PHUB_VERSION_STRING "unknown"
#endif

namespace phub::server {

CoreMetrics AddCoreMetrics(metrics::Registry& registry, keys::CoreIndex core) {
  const metrics::Labels labels{{"core", std::to_string(core)}};
  // One 1 MiB chunk sums N copies in ~50 us to a few ms; 10 us to 1 s covers chunk sizes from
  // 64 KiB to 64 MiB.
  std::vector<double> aggregation{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                  5e-3, 1e-2,   2.5e-2, 5e-2, 0.1,  0.25, 1};
  // An iteration: a millisecond (a small model on loopback) to a minute (a large one on a
  // slow link).
  std::vector<double> round{1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25,
                            0.5,  1,      2.5,  5,    10,   30,   60};
  CoreMetrics m;
  m.received_bytes = &registry.AddCounter(
      "phub_core_received_bytes_total",
      "Payload bytes the core received: gradient pushes and initial weights.", labels);
  m.sent_bytes = &registry.AddCounter("phub_core_sent_bytes_total",
                                      "Payload bytes of weights the core sent to workers.", labels);
  m.pushes = &registry.AddCounter("phub_core_pushes_total",
                                  "Gradient pushes the core received (one chunk from one worker).",
                                  labels);
  m.aggregations = &registry.AddCounter(
      "phub_core_aggregations_total",
      "Chunk-iterations the core completed: every worker's copy summed, the optimizer stepped.",
      labels);
  m.chunks = &registry.AddGauge(
      "phub_core_chunks", "Chunks the core owns, all its running jobs together (0 between jobs).",
      labels);
  m.aggregation_seconds = &registry.AddHistogram(
      "phub_core_aggregation_seconds",
      "Time of one chunk's fused pass: the sum of every worker's copy and the optimizer step.",
      std::move(aggregation), labels);
  m.round_seconds = &registry.AddHistogram(
      "phub_core_round_seconds",
      "Time the core took to aggregate as many chunks as it owns: one iteration of the job on "
      "this core, waiting for workers included.",
      std::move(round), labels);
  m.rx_on_core = &registry.AddCounter(
      "phub_core_rx_steered_connections_total",
      "Data connections whose incoming packets the kernel handled on this core's own CPU "
      "(TCP, sampled 2 s after a connection is ready): its NIC queue is steered to the core.",
      labels);
  m.rx_elsewhere = &registry.AddCounter(
      "phub_core_rx_unsteered_connections_total",
      "Data connections whose incoming packets the kernel handled on another CPU than this "
      "core's (docs/operations.md \"A PBox's NICs\": IRQ affinity, RFS, XPS).",
      labels);
  return m;
}

void AddDaemonMetrics(metrics::Registry& registry) {
  registry.AddGauge("phub_build_info", "phubd's version and wire protocol version; always 1.",
                    {{"version", PHUB_VERSION_STRING},
                     {"protocol", std::to_string(kProtocolVersion)}})
      .Set(1);
  metrics::AddProcessMetrics(registry);
}

}  // namespace phub::server
