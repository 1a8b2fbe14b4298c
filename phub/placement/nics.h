// The NICs a process moves its data through, as an operator names them: network interfaces
// ("eth0") or their addresses ("10.0.1.5"), and for verbs the RDMA device on each. Resolved
// once at start: an interface's IPv4 address (getifaddrs), an address's interface (the one
// whose prefix holds it: 127.0.0.2 is lo's), and an interface's RDMA device (the RoCE GIDs in
// sysfs that name it as their netdev).
#pragma once

#include <string>
#include <vector>

#include "phub/common/status.h"

namespace phub::placement {

struct Nic {
  std::string interface;    // "eth0"; empty for an address no interface holds
  std::string address;      // what a core listens on or dials from
  std::string rdma_device;  // verbs: "mlx5_0", "rxe1"; empty: none found (the first device)
};

// `names`: interfaces or addresses (--nics); `rdma_devices`: empty (each NIC's own, found in
// `sysfs`), one (every NIC's) or one per NIC. With `names` empty and several RDMA devices, one
// NIC per device on `default_address`; with neither, one NIC: `default_address`.
// NotFound names an interface that is not there, or an address no interface holds that is
// not a literal either, and lists the interfaces there are.
// `elsewhere`: the NICs are another box's (phubd --machine-xml --print-core-map): a name no
// interface here has is taken as an interface of that box, with no address.
StatusOr<std::vector<Nic>> ResolveNics(const std::vector<std::string>& names,
                                       const std::vector<std::string>& rdma_devices,
                                       const std::string& default_address,
                                       const std::string& sysfs = "/sys", bool elsewhere = false);

// The RDMA device whose RoCE GIDs sit on `interface` (sysfs's
// class/infiniband/DEV/ports/P/gid_attrs/ndevs/I), or empty.
std::string RdmaDeviceOnInterface(const std::string& interface, const std::string& sysfs = "/sys");

// "a,b,,c" -> {"a","b","c"}: the comma lists --nics and --rdma-device take.
std::vector<std::string> SplitList(const std::string& text);

}  // namespace phub::placement
