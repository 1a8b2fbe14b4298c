// Runs one scenario through SimGrid (flow-level max-min sharing of every link, hosts' cores)
// and returns what its iterations take. SimGrid allows one engine per process, so each call
// runs its simulation in a child process (fork) and reads the result back: callers such as
// `phubctl plan` simulate many scenarios in one process, and a scenario that SimGrid aborts on
// fails that call, not the caller.
#pragma once

#include "phub/common/status.h"
#include "phub/sim/scenario.h"

namespace phub::sim {

// Deadline: a scenario still running after `timeout_s` is killed (DeadlineExceeded).
StatusOr<Prediction> Simulate(const Scenario& scenario, double timeout_s = 600);

}  // namespace phub::sim
