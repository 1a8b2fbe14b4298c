#include "phub/server/core/nic_plan.h"

#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "phub/placement/machine.h"
#include "phub/placement/sizing.h"

namespace phub::server {

namespace {

// A NIC short of cores for its link rate (design.md "Sizing a PBox"): the cores, not the
// NIC, will limit what phubd moves.
void WarnIfUnderfed(const NicPlan& plan, double nic_bytes_per_s, bool verbs,
                    std::vector<std::string>& warnings) {
  std::vector<std::uint32_t> served(plan.nics.size(), 0);
  for (const placement::CoreSite& site : plan.placement.cores) ++served[site.nic];
  for (std::size_t k = 0; k < plan.nics.size(); ++k) {
    // --nic-gbps, where given, is what the NICs carry together; else the link's speed.
    const double bytes_per_s =
        nic_bytes_per_s > 0
            ? nic_bytes_per_s / static_cast<double>(plan.nics.size())
            : placement::InterfaceBytesPerSecond(plan.nics[k].interface);
    if (bytes_per_s <= 0 || served[k] == 0) continue;
    const double needed = placement::CoresToFeed(bytes_per_s, verbs);
    if (static_cast<double>(served[k]) + 1e-9 < std::ceil(needed)) {
      warnings.push_back(absl::StrCat(
          "NIC ", k, " (", plan.nics[k].interface.empty() ? plan.nics[k].address
                                                           : plan.nics[k].interface,
          ", ", bytes_per_s * 8 / 1e9, " Gbit/s) has ", served[k], " core",
          served[k] == 1 ? "" : "s", "; a balanced PBox gives it ", std::ceil(needed), " on ",
          verbs ? "verbs" : "TCP", " (", verbs ? placement::kVerbsCoreSecondsPerByte * 1e9
                                               : placement::kTcpCoreSecondsPerByte * 1e9,
          " ns of a core per byte, docs/design.md \"Sizing a PBox\"): its cores, not its link, "
          "will limit; raise --cores"));
    }
  }
}

}  // namespace

StatusOr<NicPlan> PlanNics(const CoreOptions& cores, const NicOptions& nics,
                           const DataPlaneOptions& data_plane) {
  NicPlan plan;
  PHUB_ASSIGN_OR_RETURN(
      plan.nics, placement::ResolveNics(nics.names, placement::SplitList(data_plane.rdma.device),
                                        cores.listen_address, "/sys",
                                        /*elsewhere=*/!nics.machine_xml.empty()));
  // Devices are looked up only for NICs named by interface or RDMA device.
  bool named = false;
  for (const placement::Nic& nic : plan.nics) {
    named = named || !nic.interface.empty() || !nic.rdma_device.empty();
  }
  PHUB_ASSIGN_OR_RETURN(std::unique_ptr<placement::Machine> machine,
                        nics.machine_xml.empty()
                            ? placement::Machine::FromSystem(/*io=*/named)
                            : placement::Machine::FromXmlFile(nics.machine_xml));
  for (const placement::Nic& nic : plan.nics) {
    int node = machine->NumaNodeOfDevice(nic.interface);
    if (node < 0 && !nic.rdma_device.empty()) node = machine->NumaNodeOfDevice(nic.rdma_device);
    plan.nic_numa_nodes.push_back(node);
  }
  if (!nics.core_map.empty()) {
    PHUB_ASSIGN_OR_RETURN(plan.placement, placement::ParseCoreMap(*machine, plan.nic_numa_nodes,
                                                                  cores.count, nics.core_map));
  } else {
    PHUB_ASSIGN_OR_RETURN(plan.placement, placement::PlaceCores(*machine, plan.nic_numa_nodes,
                                                                cores.count, cores.first_core));
  }
  std::map<std::uint32_t, int> next_queue;
  for (const placement::CoreSite& site : plan.placement.cores) {
    plan.queue_of_core.push_back(next_queue[site.nic]++);
  }
  WarnIfUnderfed(plan, nics.bytes_per_s,
                 data_plane.transport == transport::TransportKind::kVerbs,
                 plan.placement.warnings);
  return plan;
}

std::string CoreMapTable(const NicPlan& plan) {
  std::string out =
      "core\tphysical_core\tcpu\tnuma_node\tnic\tinterface\taddress\trdma_device\tqueue\n";
  for (std::size_t i = 0; i < plan.placement.cores.size(); ++i) {
    const placement::CoreSite& site = plan.placement.cores[i];
    const placement::Nic& nic = plan.nics[site.nic];
    absl::StrAppend(&out, i, "\t", site.physical_core, "\t", site.cpu, "\t", site.numa_node,
                    "\t", site.nic, "\t", nic.interface.empty() ? "-" : nic.interface, "\t",
                    nic.address, "\t", nic.rdma_device.empty() ? "-" : nic.rdma_device, "\t",
                    plan.queue_of_core[i], "\n");
  }
  return out;
}

}  // namespace phub::server
