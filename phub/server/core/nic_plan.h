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
#include "phub/server/server_options.h"

namespace phub::server {

struct NicPlan {
  std::vector<placement::Nic> nics;
  std::vector<int> nic_numa_nodes;     // per NIC; -1: unknown
  placement::Placement placement;      // per server core; warnings include the sizing's
  std::vector<int> queue_of_core;      // per server core: its rank among its NIC's cores
};

StatusOr<NicPlan> PlanNics(const ServerOptions& options);

// One line per server core, tab-separated, with a header:
//   core  physical_core  cpu  numa_node  nic  interface  address  rdma_device  queue
std::string CoreMapTable(const NicPlan& plan);

}  // namespace phub::server
