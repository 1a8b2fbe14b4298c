#include "phub/common/cpu_pinning.h"

#include <hwloc.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace phub {
namespace {

// One hwloc topology per process: loading it reads /sys and costs milliseconds.
class Topology {
 public:
  Topology() {
    hwloc_topology_init(&topo_);
    hwloc_topology_load(topo_);
  }
  ~Topology() { hwloc_topology_destroy(topo_); }
  hwloc_topology_t get() { return topo_; }

 private:
  hwloc_topology_t topo_;
};

Topology& GetTopology() {
  static Topology topology;
  return topology;
}

}  // namespace

int CountPhysicalCores() {
  int n = hwloc_get_nbobjs_by_type(GetTopology().get(), HWLOC_OBJ_CORE);
  return n > 0 ? n : 1;
}

Status PinThisThreadToCore(int index) {
  hwloc_topology_t topo = GetTopology().get();
  int cores = CountPhysicalCores();
  hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, index % cores);
  if (core == nullptr) {
    return absl::NotFoundError("hwloc found no core " + std::to_string(index % cores));
  }
  if (hwloc_set_cpubind(topo, core->cpuset, HWLOC_CPUBIND_THREAD) != 0) {
    return absl::InternalError("hwloc_set_cpubind to core " + std::to_string(index % cores) +
                               " failed: " + std::strerror(errno) +
                               "; run with --no-pin if the cpuset is restricted");
  }
  return absl::OkStatus();
}

}  // namespace phub
