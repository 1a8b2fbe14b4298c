#include "phub/ctl/plan_sizing.h"

#include <algorithm>
#include <cmath>

#include "phub/ctl/plan.h"
#include "phub/sim/chunks.h"

namespace phub::ctl {

namespace {
std::uint32_t CeilAtLeastOne(double x) {
  return static_cast<std::uint32_t>(std::max(1.0, std::ceil(x - 1e-9)));
}
}  // namespace

PboxSizing SizePboxes(const PlanOptions& o, const sim::Calibration& calibration) {
  PboxSizing sizing;
  const double per_rack = static_cast<double>(o.workers / std::max<std::uint32_t>(1, o.racks));
  sizing.rack_gbps = per_rack * o.gbps + (o.racks > 1 ? o.uplink_gbps : 0);
  sizing.nic_gbps = o.nic_gbps;
  const std::uint32_t nics = CeilAtLeastOne(sizing.rack_gbps / o.nic_gbps);
  sizing.pboxes_per_rack = CeilAtLeastOne(static_cast<double>(nics) / o.max_nics);
  sizing.nics = CeilAtLeastOne(static_cast<double>(nics) / sizing.pboxes_per_rack);
  // The bytes a second each PBox receives at its share of the rack's rate, and what a core
  // spends on each (its transport's CPU, at least the sum's).
  sim::Scenario transport;
  transport.verbs = o.verbs;
  transport.calibration = calibration;
  const double bytes_per_second = sizing.rack_gbps * 1e9 / 8 / sizing.pboxes_per_rack;
  sizing.cores =
      CeilAtLeastOne(bytes_per_second * sim::CoreSecondsPerByteIn(transport) / kBusiestCore);
  return sizing;
}

sim::Scenario SizedScenario(const sim::Scenario& base, const PboxSizing& sizing) {
  sim::Scenario s = base;
  s.scheme = s.racks > 1 ? sim::Scheme::kPsRacks : sim::Scheme::kPs;
  s.network = sim::Network::kPbox;
  s.ps_hosts = 1;
  // One job on the sized boxes, their NICs as one link of the rack's rate: the user's own PS
  // host (--ps-nics, --jobs, --streams, --pace-gbps) is not what is sized.
  s.ps_nics = 1;
  s.ps_nic_gbps = 0;
  s.jobs.clear();
  s.streaming = false;
  s.ps_pace_gbps = 0;
  if (s.scheme != sim::Scheme::kPs) s.push_bytes_ratio = 1;
  // Cores past the chunks carry nothing (each chunk is on one core), and each is connections
  // to simulate: at most one a chunk.
  const std::uint32_t cores = sizing.cores * sizing.pboxes_per_rack;
  s.ps_cores = std::max<std::uint32_t>(
      1, std::min<std::uint64_t>(cores, sim::CutChunks(s).size()));
  return s;
}

}  // namespace phub::ctl
