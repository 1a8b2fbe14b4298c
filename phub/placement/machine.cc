#include "phub/placement/machine.h"

#include <hwloc.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::placement {

namespace {
// A bitmap naming exactly one NUMA node: its OS number; otherwise -1.
int SingleNode(hwloc_const_nodeset_t nodeset) {
  if (nodeset == nullptr || hwloc_bitmap_weight(nodeset) != 1) return -1;
  return hwloc_bitmap_first(nodeset);
}
}  // namespace

StatusOr<std::unique_ptr<Machine>> Machine::Load(
    const std::string& what, const std::function<int(hwloc_topology*)>& source, bool io) {
  std::unique_ptr<Machine> machine(new Machine());
  if (hwloc_topology_init(&machine->topology_) != 0) {
    return absl::InternalError(absl::StrCat("hwloc_topology_init: ", std::strerror(errno)));
  }
  if (io) {
    // NICs are PCI devices with OS devices (netdevs, RDMA devices) below them: keep those.
    hwloc_topology_set_io_types_filter(machine->topology_, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    // hwloc's Linux backend reads the PCI devices from sysfs itself; its libpciaccess, OpenCL
    // and GL plugins add nothing a NIC needs and cost seconds where a process starts slowly
    // (2 s under TSan, more under emulation: measured).
    for (const char* plugin : {"pci", "opencl", "gl", "cuda", "nvml", "rsmi", "levelzero"}) {
      hwloc_topology_set_components(machine->topology_,
                                    HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, plugin);
    }
  }
  if (source && source(machine->topology_) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hwloc cannot read ", what, ": ", std::strerror(errno)));
  }
  if (hwloc_topology_load(machine->topology_) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("hwloc cannot load ", what, ": ", std::strerror(errno)));
  }
  const int cores = hwloc_get_nbobjs_by_type(machine->topology_, HWLOC_OBJ_CORE);
  for (int i = 0; i < cores; ++i) {
    hwloc_obj_t core = hwloc_get_obj_by_type(machine->topology_, HWLOC_OBJ_CORE, i);
    machine->cores_.push_back(
        {i, hwloc_bitmap_first(core->cpuset), SingleNode(core->nodeset)});
  }
  if (machine->cores_.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("hwloc finds no cores in ", what));
  }
  machine->numa_nodes_ =
      std::max(1, hwloc_get_nbobjs_by_type(machine->topology_, HWLOC_OBJ_NUMANODE));
  return machine;
}

StatusOr<std::unique_ptr<Machine>> Machine::FromSystem(bool io) {
  return Load("this machine", nullptr, io);
}

StatusOr<std::unique_ptr<Machine>> Machine::FromXmlFile(const std::string& path) {
  return Load(absl::StrCat("the topology file '", path, "'"),
              [&](hwloc_topology* t) { return hwloc_topology_set_xml(t, path.c_str()); },
              /*io=*/true);
}

StatusOr<std::unique_ptr<Machine>> Machine::FromXmlText(const std::string& xml) {
  return Load("an XML topology", [&](hwloc_topology* t) {
    // hwloc wants the terminating NUL counted.
    return hwloc_topology_set_xmlbuffer(t, xml.c_str(), static_cast<int>(xml.size() + 1));
  }, /*io=*/true);
}

Machine::~Machine() {
  if (topology_ != nullptr) hwloc_topology_destroy(topology_);
}

int Machine::NumaNodeOfDevice(const std::string& os_device) const {
  for (hwloc_obj_t os = hwloc_get_next_osdev(topology_, nullptr); os != nullptr;
       os = hwloc_get_next_osdev(topology_, os)) {
    if (os->name == nullptr || os_device != os->name) continue;
    hwloc_obj_t near = hwloc_get_non_io_ancestor_obj(topology_, os);
    return near == nullptr ? -1 : SingleNode(near->nodeset);
  }
  return -1;
}

}  // namespace phub::placement
