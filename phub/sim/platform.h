// The simulated cluster of a Scenario, built in the running SimGrid engine: racks of hosts, each
// host with a private link each way to its rack's (non-blocking) switch, each rack's switch
// with an uplink each way to the core (racks > 1), every route between two hosts given
// explicitly (a full zone: their links, and the two racks' uplinks when the racks differ).
//
// Workers are merged into equal groups (at most Scenario::max_worker_hosts hosts in all, as
// many in each rack): a group's host has the links of all its members together and sends their
// flows as one; max-min sharing gives every flow of a link the same share, so with equal groups
// a group's flow gets what its members' would together, and the times are the members' (exact
// while the members are identical, as in data-parallel training). The ring's hosts are single
// workers (ring_actors.h). A PS host's incoming link carries the calibrated incast
// (calibration.h): its capacity follows how far the hosts pushing into it overload it.
//
// A PS host of several NICs (Scenario::ps_nics) is a host per NIC, each with that NIC's links
// and the cores phubd puts on it: a core's connections and its chunks' work are on its NIC's
// host. Jobs sharing the PS hosts (Scenario::jobs) have worker groups of their own; where
// phubd paces their sends, each PS host's routes to a job's workers go through a link of the
// job's paced rate (pacing.h).
#pragma once

#include <cstddef>
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
  std::uint32_t rack = 0;
  std::uint32_t job = 0;  // Scenario::jobs' index (0: the only job)
};

struct Platform {
  std::vector<WorkerGroup> groups;  // rack by rack
  // kPs: the PS hosts the keys spread over; kPsRacks: every rack's PBox, by rack. Each its
  // first NIC's host.
  std::vector<simgrid::s4u::Host*> servers;
  // [server][nic]: each PS host's NICs' hosts (one, servers[k], without Scenario::ps_nics).
  std::vector<std::vector<simgrid::s4u::Host*>> nics;

  // The host of PS host `server`'s core `core`: its NIC's (core i on NIC i % NICs).
  simgrid::s4u::Host* CoreHost(std::size_t server, std::size_t core) const {
    return nics[server][core % nics[server].size()];
  }
};

// A worker's link rate in bytes a second after the calibrated goodput.
double WorkerBytesPerSecond(const Scenario& scenario);
// A PS host's link rate in bytes a second, all its NICs together: ps_nics x ps_nic_gbps where
// that is given; else a PBox's is its rack's workers' rates plus its rack's uplink's (kPbox),
// a cloud server's one worker's (kCloud).
double PboxBytesPerSecond(const Scenario& scenario);
// One NIC's of a PS host: PboxBytesPerSecond over ps_nics.
double NicBytesPerSecond(const Scenario& scenario);
// A rack's uplink rate in bytes a second after the goodput (0 with one rack).
double UplinkBytesPerSecond(const Scenario& scenario);

// Builds the platform in the current engine (before Engine::run). Hosts compute at 1e9
// flop/s: an execution of x * 1e9 flops takes x seconds.
Platform BuildPlatform(const Scenario& scenario);

inline constexpr double kFlopsPerSecond = 1e9;

}  // namespace phub::sim
