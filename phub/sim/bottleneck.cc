#include "phub/sim/bottleneck.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "phub/sim/chunks.h"
#include "phub/sim/pacing.h"
#include "phub/sim/platform.h"
#include "phub/sim/tree_actors.h"

namespace phub::sim {

void FindBottleneck(const Scenario& s, Prediction& p) {
  double total = 0;
  for (const Tensor& t : s.tensors) total += static_cast<double>(t.bytes);
  const double t = p.seconds_per_iteration;
  std::vector<std::pair<std::string, double>> busy;
  const double n = static_cast<double>(s.workers / s.racks), racks = s.racks;
  const double uplink = UplinkBytesPerSecond(s);
  const double cores = std::max<std::uint32_t>(1, s.ps_cores);
  // Bytes each resource carries an iteration (each way), over its rate and the time.
  if (s.scheme == Scheme::kPs) {
    const double k = s.ps_hosts;
    p.bytes_per_worker = total;
    // Workers' gradients a second into the PS hosts, every job's at its own time (one job:
    // N / t).
    const std::vector<Job> jobs = JobsOf(s);
    double workers_per_second = 0, fastest_job = t;
    for (std::size_t j = 0; j < jobs.size(); ++j) {
      const double tj = j < p.job_seconds_per_iteration.size() ? p.job_seconds_per_iteration[j] : t;
      workers_per_second += jobs[j].workers / tj;
      fastest_job = std::min(fastest_job, tj);
    }
    const double in = workers_per_second * total / k;  // weights' bytes a second out of a PS host
    if (s.ps_nics > 1) {
      // Chunks spread over cores by bytes, cores over NICs: the busiest NIC has the most cores.
      const double share = static_cast<double>((s.ps_cores + s.ps_nics - 1) / s.ps_nics) / cores;
      busy.emplace_back("a PS host's busiest NIC", in * share / NicBytesPerSecond(s));
    } else {
      busy.emplace_back(k > 1 ? "a PS host's link" : "the PBox's link", in / PboxBytesPerSecond(s));
    }
    busy.emplace_back("a worker's link", total / WorkerBytesPerSecond(s) / fastest_job);
    busy.emplace_back(k > 1 ? "a PS host's cores" : "the PBox's cores",
                      in * CoreSecondsPerByteIn(s) / cores);
    if (!PacedJobBytesPerSecond(s).empty()) {
      busy.emplace_back("phubd's pacing of shared sends", in / (s.ps_pace_gbps * 1e9 / 8));
    }
    if (s.racks > 1) {  // rack 0's PBox takes every other rack's; K = racks: each 1 / K
      // each way: pushes out to (and weights in from) the other racks' PBoxes, weights out to
      // (pushes in from) the other racks' workers
      const double crossing = k > 1 ? 2 * n * total * (racks - 1) / racks : (racks - 1) * n * total;
      busy.emplace_back("a rack's uplink", crossing / uplink / t);
    }
  } else if (s.scheme == Scheme::kPsRacks) {
    p.bytes_per_worker = total;
    const double crossing = 2 * (racks - 1) / racks * total;  // sums out, others' sums in
    busy.emplace_back("a rack's PBox's link", (n * total + crossing) / PboxBytesPerSecond(s) / t);
    busy.emplace_back("a worker's link", total / WorkerBytesPerSecond(s) / t);
    busy.emplace_back("a rack's uplink", crossing / uplink / t);
    busy.emplace_back("a rack's PBox's cores", (n + 1) * total * CoreSecondsPerByteIn(s) / cores / t);
  } else if (s.scheme == Scheme::kTree) {
    p.bytes_per_worker = TreeBytesPerWorker(s);  // the busiest rank's, 2 S from N = 4 on
    busy.emplace_back("a worker's link", p.bytes_per_worker / WorkerBytesPerSecond(s) / t);
  } else {
    p.bytes_per_worker = 2.0 * (s.workers - 1) / s.workers * total;
    busy.emplace_back("a worker's link", p.bytes_per_worker / WorkerBytesPerSecond(s) / t);
    if (s.racks > 1) busy.emplace_back("a rack's uplink", p.bytes_per_worker / uplink / t);
  }
  if (p.compute_seconds > 0) busy.emplace_back("a worker's compute", p.compute_seconds / t);
  const auto top = std::max_element(busy.begin(), busy.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  p.bottleneck = top->first;
  p.bottleneck_busy = top->second;
}

}  // namespace phub::sim
