// What bounds a simulated scenario: each resource's busy fraction at the predicted times, from
// the bytes and CPU an iteration needs of it (worked out from the scenario, not read from
// SimGrid), and the busiest one.
#pragma once

#include "phub/sim/scenario.h"

namespace phub::sim {

// Fills p.bytes_per_worker, p.bottleneck and p.bottleneck_busy. REQUIRES: p's times set
// (seconds_per_iteration; job_seconds_per_iteration, one a job).
void FindBottleneck(const Scenario& scenario, Prediction& p);

}  // namespace phub::sim
