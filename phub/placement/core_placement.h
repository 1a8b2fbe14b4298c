// Which physical core each of phubd's server cores runs on, and which NIC it serves. A
// balanced PBox has a NIC per socket with the cores and memory bandwidth to feed it: a core
// that serves a NIC of another NUMA node moves every byte across the socket interconnect, so
// cores are taken from their NIC's node first. The rule, which the tests hold on synthetic
// machines: a core serves a NIC of another node only when its own node has no NIC.
//
// NICs whose node hwloc does not know (virtual interfaces, soft-RoCE, loopback) take any core.
// Server cores are spread evenly over the NICs (the first ones get one more when they do not
// divide); a NIC left without a core is reported, as is a core sharing its physical core.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/placement/machine.h"

namespace phub::placement {

struct CoreSite {
  int physical_core = 0;  // PhysicalCore::index
  int cpu = 0;            // PhysicalCore::first_cpu
  int numa_node = -1;     // the core's node
  std::uint32_t nic = 0;  // index into the NIC list
  bool nic_is_local = true;  // the core's node is its NIC's (or either is unknown)
};

struct Placement {
  std::vector<CoreSite> cores;        // one per server core, in server-core order
  std::vector<std::string> warnings;  // what an operator should know (logged at start)
};

// `nic_numa_nodes`: each NIC's node (-1: unknown), in --nics order (at least one). `cores`
// server cores; `first_core`: where the search for free cores starts (--first-core), so that
// with one NIC of unknown node core i is physical core first_core + i, as before NICs counted.
StatusOr<Placement> PlaceCores(const Machine& machine, const std::vector<int>& nic_numa_nodes,
                               std::uint32_t cores, int first_core);

// --core-map "P@N,P@N,...": server core i on physical core P, serving NIC N; one entry per
// server core. Errors name the entry and what is wrong with it.
StatusOr<Placement> ParseCoreMap(const Machine& machine, const std::vector<int>& nic_numa_nodes,
                                 std::uint32_t cores, const std::string& map);

// The map as --core-map takes it ("0@0,8@1"), for the start-up log and --print-core-map.
std::string FormatCoreMap(const Placement& placement);

}  // namespace phub::placement
