// PHub's exchange on the simulated platform: each worker group, as backward produces a tensor,
// pushes its chunks to the PBox; each chunk, once every group's copy is in, takes its core for
// the chunk's CPU (receiving and summing N copies, the optimizer step: the calibrated core
// seconds per byte received) and sends the weights back to every group; a group's iteration
// ends when every chunk's weights are in. Chunks go to cores as phubd's key table places them
// (the least loaded core by bytes, in tensor order). Jobs sharing the PS hosts each have their
// chunks (cut alike, on the same cores: a core sums one chunk at a time, whichever job's) and
// their groups; pushes carry Scenario::push_bytes_ratio of the weights' bytes.
#pragma once

#include "phub/sim/iteration_log.h"
#include "phub/sim/platform.h"
#include "phub/sim/scenario.h"

namespace phub::sim {

// Creates the actors in the current engine; they record into `log` while Engine::run runs.
void StartPsActors(const Scenario& scenario, const Platform& platform, IterationLog& log);

}  // namespace phub::sim
