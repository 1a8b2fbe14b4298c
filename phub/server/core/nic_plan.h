// phubd's plan of its server cores on a PBox with several NICs: the NICs resolved (--nics,
// --rdma-device), each core's physical core and NIC (placement/: by NUMA node, or --core-map),
// the queue each core takes on its NIC, and what an operator should be told about it (cores
// across the socket interconnect, too few cores to feed a NIC). Made once at start; the same
// text phubd logs is what --print-core-map prints, which deploy/pbox/tune-nics.sh reads.
#pragma once

#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/placement/core_placement.h"
#include "phub/placement/nics.h"
#include "phub/server/core/core_options.h"

namespace phub::server {

struct NicPlan {
  std::vector<placement::Nic> nics;
  std::vector<int> nic_numa_nodes;     // per NIC; -1: unknown
  placement::Placement placement;      // per server core; warnings include the sizing's
  std::vector<int> queue_of_core;      // per server core: its rank among its NIC's cores
};

// `cores`: how many, and from which physical core on; `nics`: --nics, --core-map, --machine-xml
// and --nic-gbps; `data_plane`: the transport and --rdma-device (one per NIC).
StatusOr<NicPlan> PlanNics(const CoreOptions& cores, const NicOptions& nics,
                           const DataPlaneOptions& data_plane);

// One line per server core, tab-separated, with a header:
//   core  physical_core  cpu  numa_node  nic  interface  address  rdma_device  queue
std::string CoreMapTable(const NicPlan& plan);

}  // namespace phub::server
