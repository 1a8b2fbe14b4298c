#include "phub/placement/nics.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "phub/placement/sizing.h"

namespace phub::placement {

namespace {

namespace fs = std::filesystem;

struct InterfaceAddress {
  std::string interface;
  in_addr address{};
  in_addr netmask{};
};

// Every IPv4 address of every interface that is up, in getifaddrs order.
std::vector<InterfaceAddress> Ipv4Addresses() {
  std::vector<InterfaceAddress> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    InterfaceAddress entry{a->ifa_name};
    entry.address = reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr;
    if (a->ifa_netmask != nullptr) {
      entry.netmask = reinterpret_cast<sockaddr_in*>(a->ifa_netmask)->sin_addr;
    }
    out.push_back(entry);
  }
  freeifaddrs(list);
  return out;
}

std::string ToString(in_addr address) {
  char text[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &address, text, sizeof(text));
  return text;
}

std::string InterfaceList(const std::vector<InterfaceAddress>& all) {
  return absl::StrJoin(all, ", ", [](std::string* out, const InterfaceAddress& a) {
    absl::StrAppend(out, a.interface, " ", ToString(a.address));
  });
}

StatusOr<Nic> ResolveOne(const std::string& name, const std::vector<InterfaceAddress>& all) {
  in_addr literal{};
  if (inet_pton(AF_INET, name.c_str(), &literal) == 1) {
    // The interface whose own address it is, else the one whose prefix holds it.
    for (const InterfaceAddress& a : all) {
      if (a.address.s_addr == literal.s_addr) return Nic{a.interface, name, ""};
    }
    for (const InterfaceAddress& a : all) {
      if ((a.address.s_addr & a.netmask.s_addr) == (literal.s_addr & a.netmask.s_addr) &&
          a.netmask.s_addr != 0) {
        return Nic{a.interface, name, ""};
      }
    }
    return Nic{"", name, ""};  // bindable or not, listening will say
  }
  in6_addr literal6{};
  if (inet_pton(AF_INET6, name.c_str(), &literal6) == 1) return Nic{"", name, ""};
  for (const InterfaceAddress& a : all) {
    if (a.interface == name) return Nic{name, ToString(a.address), ""};
  }
  return absl::NotFoundError(absl::StrCat(
      "NIC '", name, "' is neither an interface with an IPv4 address nor an address; there are: ",
      all.empty() ? std::string("none") : InterfaceList(all), " (`ip -brief address` lists them)"));
}

std::string ReadFirstLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return std::string(absl::StripAsciiWhitespace(line));
}

}  // namespace

std::vector<std::string> SplitList(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipWhitespace());
}

std::string RdmaDeviceOnInterface(const std::string& interface, const std::string& sysfs) {
  std::error_code ec;
  const fs::path root = fs::path(sysfs) / "class" / "infiniband";
  // Sorted, so that the answer does not depend on directory order.
  std::map<std::string, fs::path> devices;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    devices.emplace(entry.path().filename().string(), entry.path());
  }
  for (const auto& [name, path] : devices) {
    for (const auto& port : fs::directory_iterator(path / "ports", ec)) {
      for (const auto& ndev : fs::directory_iterator(port.path() / "gid_attrs" / "ndevs", ec)) {
        if (ReadFirstLine(ndev.path()) == interface) return name;
      }
    }
  }
  return "";
}

StatusOr<std::vector<Nic>> ResolveNics(const std::vector<std::string>& names,
                                       const std::vector<std::string>& rdma_devices,
                                       const std::string& default_address,
                                       const std::string& sysfs, bool elsewhere) {
  if (!names.empty() && rdma_devices.size() > 1 && rdma_devices.size() != names.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--nics lists ", names.size(), " NICs but --rdma-device ", rdma_devices.size(),
        " devices: give one device per NIC, in the same order, or one for all"));
  }
  std::vector<Nic> nics;
  if (names.empty()) {
    // One NIC per RDMA device named (InfiniBand has no interface to name), all on the
    // listen address.
    const std::size_t count = std::max<std::size_t>(1, rdma_devices.size());
    for (std::size_t k = 0; k < count; ++k) {
      nics.push_back({"", default_address, rdma_devices.empty() ? "" : rdma_devices[k]});
    }
    return nics;
  }
  const std::vector<InterfaceAddress> all = Ipv4Addresses();
  for (std::size_t k = 0; k < names.size(); ++k) {
    StatusOr<Nic> resolved = ResolveOne(names[k], all);
    if (!resolved.ok() && elsewhere) resolved = Nic{names[k], "-", ""};
    PHUB_RETURN_IF_ERROR(resolved.status());
    Nic nic = *std::move(resolved);
    if (rdma_devices.size() == 1) {
      nic.rdma_device = rdma_devices[0];
    } else if (!rdma_devices.empty()) {
      nic.rdma_device = rdma_devices[k];
    } else if (!nic.interface.empty()) {
      nic.rdma_device = RdmaDeviceOnInterface(nic.interface, sysfs);
    }
    nics.push_back(std::move(nic));
  }
  return nics;
}

double InterfaceBytesPerSecond(const std::string& interface, const std::string& sysfs) {
  if (interface.empty()) return 0;
  const std::string text = ReadFirstLine(fs::path(sysfs) / "class" / "net" / interface / "speed");
  double mbits = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), mbits);
  if (ec != std::errc() || !(mbits > 0)) return 0;  // -1 for a link that is down
  return mbits * 1e6 / 8;
}

}  // namespace phub::placement
