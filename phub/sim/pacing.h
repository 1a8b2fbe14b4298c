// phubd's pacing of a shared PS host's sends (phub/server/shard/fair_send_queue.h), as the
// simulator models it. While two jobs or more share a core, phubd starts the core's sends no
// faster than --nic-gbps / cores, in start-time fair queueing order by job weight, and a job
// that cannot use its share (its own workers' links are slower) leaves it to the others. Over
// a window in which every job keeps bytes queued, that is weighted max-min sharing of the paced
// rate with each job's demand capped by its workers' links: the rates computed here.
//
// SimGrid cannot weigh flows: s4u::Comm has set_rate (a cap) and no priority (the kernel's
// per-action sharing penalty is no s4u API). So the platform puts a link of each
// job's rate on the routes from each PS host to that job's workers (platform.cc): the shares
// phubd's scheduler gives, set as rates, not its queue simulated unit by unit. Not modelled:
// the token bucket's 2 ms bursts, a unit being one chunk to every worker of a job, a job
// finishing early (the rates hold while every job runs: the window the bench measures), and
// the receive side, which phubd does not schedule (pushes are read as they come, and TCP shares
// the ingress per connection, as max-min does).
#pragma once

#include <vector>

#include "phub/sim/scenario.h"

namespace phub::sim {

// Per job, the payload bytes a second one PS host sends it while every job runs; empty where
// nothing is paced (one job, or Scenario::ps_pace_gbps 0).
std::vector<double> PacedJobBytesPerSecond(const Scenario& scenario);

// Weighted max-min sharing of `capacity` among demands: each gets min(its demand, its weight
// x a level), the level the highest at which the total is at most `capacity` (all demands
// where they fit).
std::vector<double> WeightedShares(double capacity, const std::vector<double>& demands,
                                   const std::vector<double>& weights);

}  // namespace phub::sim
