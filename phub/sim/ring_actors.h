// Ring allreduce on the simulated platform, as phub/ring runs it: each bucket's bytes
// (collective_rank.h) cut into N segments; 2 (N - 1) steps (reduce-scatter, then all-gather),
// in each of which every worker sends one segment to the next and waits for one from the
// previous. On a star every link carries one segment each way a step, however many workers: a
// ring of at most max_worker_hosts hosts with the N-worker ring's 2 (N - 1) steps of S / N
// takes its time.
#pragma once

#include "phub/sim/iteration_log.h"
#include "phub/sim/platform.h"
#include "phub/sim/scenario.h"

namespace phub::sim {

void StartRingActors(const Scenario& scenario, const Platform& platform, IterationLog& log);

}  // namespace phub::sim
