// What phubd needs to know of the box it runs on, read through hwloc: its physical cores, the
// NUMA node each sits on, and the NUMA node of a NIC (a network interface or an RDMA device,
// by the PCI device hwloc finds it under). Loaded from the running system, or from an hwloc
// XML file (`lstopo box.xml` on a real PBox; the tests' synthetic two-socket boxes), so the
// placement of cores can be tested on machines this one is not.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "phub/common/status.h"

struct hwloc_topology;

namespace phub::placement {

struct PhysicalCore {
  int index = 0;      // hwloc's logical index among cores (what --first-core counts in)
  int first_cpu = 0;  // the OS number of its first hardware thread (/proc/interrupts' CPUn)
  int numa_node = -1; // OS number of its NUMA node; -1: none or several
};

class Machine {
 public:
  // The running system; with `io`, its PCI and OS devices too (read from sysfs: milliseconds).
  static StatusOr<std::unique_ptr<Machine>> FromSystem(bool io = true);
  // An hwloc XML export (lstopo FILE.xml, or hwloc-gather-topology's).
  static StatusOr<std::unique_ptr<Machine>> FromXmlFile(const std::string& path);
  static StatusOr<std::unique_ptr<Machine>> FromXmlText(const std::string& xml);
  ~Machine();
  Machine(const Machine&) = delete;
  Machine& operator=(const Machine&) = delete;

  const std::vector<PhysicalCore>& cores() const { return cores_; }
  int numa_nodes() const { return numa_nodes_; }

  // The NUMA node of the device hwloc names `os_device` ("eth0", "mlx5_0"): that of the nearest
  // non-I/O object above its PCI device; -1 when hwloc does not know the device (virtual
  // interfaces: lo, veth, dummy; soft-RoCE) or it hangs off several nodes.
  int NumaNodeOfDevice(const std::string& os_device) const;

 private:
  Machine() = default;
  static StatusOr<std::unique_ptr<Machine>> Load(
      const std::string& what, const std::function<int(hwloc_topology*)>& source, bool io);

  hwloc_topology* topology_ = nullptr;
  std::vector<PhysicalCore> cores_;
  int numa_nodes_ = 0;
};

}  // namespace phub::placement
