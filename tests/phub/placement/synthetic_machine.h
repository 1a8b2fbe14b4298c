// hwloc XML for machines this one is not: `packages` sockets of `cores_per_package` cores (one
// hardware thread each), a NUMA node per socket, and NICs on PCI devices below a socket (or
// below the machine, NUMA-less), each with its netdev and optionally an RDMA device.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

namespace phub::placement::testing {

struct SyntheticNic {
  std::string netdev;       // "eth0"
  int package = -1;         // the socket it hangs off; -1: the machine (no single node)
  std::string rdma_device;  // "mlx5_0"; empty: none
};

inline std::string Mask(unsigned long long bits) {
  char text[32];
  std::snprintf(text, sizeof(text), "0x%08llx", bits);
  return text;
}

inline std::string SyntheticMachineXml(int packages, int cores_per_package,
                                       const std::vector<SyntheticNic>& nics) {
  int gp = 1;
  auto next = [&] { return std::to_string(++gp); };
  auto sets = [](unsigned long long cpus, unsigned long long nodes) {
    return " cpuset=\"" + Mask(cpus) + "\" complete_cpuset=\"" + Mask(cpus) + "\" nodeset=\"" +
           Mask(nodes) + "\" complete_nodeset=\"" + Mask(nodes) + "\"";
  };
  int bus = 0;
  auto pci = [&](const SyntheticNic& nic) {
    char busid[32];
    std::snprintf(busid, sizeof(busid), "0000:%02x:00.0", ++bus);
    std::string xml = "<object type=\"Bridge\" gp_index=\"" + next() +
                      "\" bridge_type=\"0-1\" depth=\"0\" bridge_pci=\"0000:[" +
                      std::string(busid).substr(5, 2) + "-" + std::string(busid).substr(5, 2) +
                      "]\">\n<object type=\"PCIDev\" gp_index=\"" + next() + "\" pci_busid=\"" +
                      busid + "\" pci_type=\"0200 [15b3:1017] [15b3:0020] 00\">\n" +
                      "<object type=\"OSDev\" gp_index=\"" + next() + "\" name=\"" + nic.netdev +
                      "\" osdev_type=\"2\"/>\n";
    if (!nic.rdma_device.empty()) {
      xml += "<object type=\"OSDev\" gp_index=\"" + next() + "\" name=\"" + nic.rdma_device +
             "\" osdev_type=\"3\"/>\n";
    }
    return xml + "</object>\n</object>\n";
  };
  const int total = packages * cores_per_package;
  const unsigned long long all_cpus = (1ull << total) - 1, all_nodes = (1ull << packages) - 1;
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE topology SYSTEM \"hwloc2.dtd\">\n"
      "<topology version=\"2.0\">\n<object type=\"Machine\" os_index=\"0\"" +
      sets(all_cpus, all_nodes) + " allowed_cpuset=\"" + Mask(all_cpus) +
      "\" allowed_nodeset=\"" + Mask(all_nodes) + "\" gp_index=\"1\">\n";
  for (int p = 0; p < packages; ++p) {
    const unsigned long long cpus = ((1ull << cores_per_package) - 1) << (p * cores_per_package);
    const unsigned long long node = 1ull << p;
    xml += "<object type=\"Package\" os_index=\"" + std::to_string(p) + "\"" + sets(cpus, node) +
           " gp_index=\"" + next() + "\">\n";
    xml += "<object type=\"NUMANode\" os_index=\"" + std::to_string(p) + "\"" + sets(cpus, node) +
           " gp_index=\"" + next() + "\"/>\n";
    for (int c = 0; c < cores_per_package; ++c) {
      const int cpu = p * cores_per_package + c;
      const unsigned long long bit = 1ull << cpu;
      xml += "<object type=\"Core\" os_index=\"" + std::to_string(cpu) + "\"" + sets(bit, node) +
             " gp_index=\"" + next() + "\">\n<object type=\"PU\" os_index=\"" +
             std::to_string(cpu) + "\"" + sets(bit, node) + " gp_index=\"" + next() +
             "\"/>\n</object>\n";
    }
    for (const SyntheticNic& nic : nics) {
      if (nic.package == p) xml += pci(nic);
    }
    xml += "</object>\n";
  }
  for (const SyntheticNic& nic : nics) {
    if (nic.package < 0) xml += pci(nic);
  }
  return xml + "</object>\n</topology>\n";
}

}  // namespace phub::placement::testing
