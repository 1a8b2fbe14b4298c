// Pins the calling thread to one physical core, found with hwloc (so hyper-thread siblings and
// offline CPUs are handled). A shard pinned to its core keeps its slots and weights in that
// core's caches and its NUMA node's memory.
#pragma once

#include "phub/common/status.h"

namespace phub {

// Number of physical cores hwloc sees in this process's allowed cpuset (at least 1).
int CountPhysicalCores();

// Binds the calling thread to physical core `index % CountPhysicalCores()`.
Status PinThisThreadToCore(int index);

}  // namespace phub
