// Racks of racks on the simulated platform (Scheme::kPsRacks), as phubd --topology runs them:
// a worker pushes each chunk to its rack's PBox; the rack's PBox sums its rack's copies (its
// core's CPU for them) and sends the sum to the chunk's home PBox (its own when the chunk's
// home is its rack); the home sums the racks' sums, steps, and sends the weights to every
// rack's PBox, which sends them on to its workers. So each chunk crosses the core once up and
// once down a rack, whatever the rack's size (docs/design.md "Racks of racks").
#pragma once

#include "phub/sim/iteration_log.h"
#include "phub/sim/platform.h"
#include "phub/sim/scenario.h"

namespace phub::sim {

void StartRackPsActors(const Scenario& scenario, const Platform& platform, IterationLog& log);

}  // namespace phub::sim
