#include "phub/sim/pacing.h"

#include "phub/sim/platform.h"

namespace phub::sim {

std::vector<double> WeightedShares(double capacity, const std::vector<double>& demands,
                                   const std::vector<double>& weights) {
  const std::size_t n = demands.size();
  std::vector<double> share(n, 0);
  std::vector<bool> capped(n, false);
  double left = capacity;
  // Water-filling: each round caps the jobs whose demand is under the level the others set,
  // and gives the rest of the capacity out again; at most n rounds.
  for (std::size_t round = 0; round < n; ++round) {
    double weight = 0;
    for (std::size_t j = 0; j < n; ++j) weight += capped[j] ? 0 : weights[j];
    if (weight <= 0) break;
    const double level = left / weight;
    bool any = false;
    for (std::size_t j = 0; j < n; ++j) {
      if (!capped[j] && demands[j] <= weights[j] * level) {
        capped[j] = any = true;
        share[j] = demands[j];
        left -= demands[j];
      }
    }
    if (!any) {
      for (std::size_t j = 0; j < n; ++j) {
        if (!capped[j]) share[j] = weights[j] * level;
      }
      break;
    }
  }
  return share;
}

std::vector<double> PacedJobBytesPerSecond(const Scenario& s) {
  const std::vector<Job> jobs = JobsOf(s);
  if (jobs.size() < 2 || !(s.ps_pace_gbps > 0)) return {};
  // What each job could take from one PS host: its workers' links (the weights go out to
  // them), its keys spread over the PS hosts.
  std::vector<double> demands, weights;
  for (const Job& j : jobs) {
    demands.push_back(j.workers * WorkerBytesPerSecond(s) / s.ps_hosts);
    weights.push_back(j.weight);
  }
  // phubd paces the bytes it starts: payload, at --nic-gbps (no goodput: it is the payload's).
  return WeightedShares(s.ps_pace_gbps * 1e9 / 8, demands, weights);
}

}  // namespace phub::sim
