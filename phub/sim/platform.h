// The simulated cluster of a Scenario, built in the running SimGrid engine: a star (a
// non-blocking switch) with a private split-duplex link per host. For the PS, workers are
// merged into at most Scenario::max_worker_hosts groups of as many identical members each: a
// group's host has the link of all its members together and sends their flows as one; every
// flow of a link gets the same max-min share, so with equal groups a group's flow gets what
// its members' would together, and the times are the members' (exact while the members are
// identical, as in data-parallel training). The ring's hosts are single workers (ring_actors.h).
#pragma once

#include <cstdint>
#include <vector>

#include "phub/sim/scenario.h"

namespace simgrid::s4u {
class Host;
}

namespace phub::sim {

struct WorkerGroup {
  simgrid::s4u::Host* host = nullptr;
  std::uint32_t members = 0;
};

struct Platform {
  std::vector<WorkerGroup> groups;
  std::vector<simgrid::s4u::Host*> servers;  // kPs: the PS hosts, Scenario::ps_cores cores each
};

// A worker's link rate in bytes a second after the calibrated goodput.
double WorkerBytesPerSecond(const Scenario& scenario);
// A PS host's link rate in bytes a second (kPbox: N workers' worth; kCloud: one worker's).
double PboxBytesPerSecond(const Scenario& scenario);

// Builds the platform in the current engine (before Engine::run). Hosts compute at 1e9
// flop/s: an execution of x * 1e9 flops takes x seconds.
Platform BuildPlatform(const Scenario& scenario);

inline constexpr double kFlopsPerSecond = 1e9;

}  // namespace phub::sim
