// The standard process_* series every Prometheus client library exports (memory, CPU, start
// time, descriptors), read from /proc/self at each scrape, so dashboards built for any
// exporter work on phubd too. Linux only: elsewhere the series read NaN.
#pragma once

#include "phub/metrics/registry.h"

namespace phub::metrics {

void AddProcessMetrics(Registry& registry);

}  // namespace phub::metrics
