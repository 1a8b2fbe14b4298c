#include "phub/sim/scenario.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace phub::sim {

std::vector<Job> JobsOf(const Scenario& s) {
  return s.jobs.empty() ? std::vector<Job>{{s.workers, 1}} : s.jobs;
}

std::uint32_t JobIterations(const Scenario& s, std::size_t job) {
  const std::vector<Job> jobs = JobsOf(s);
  double least = jobs[0].weight;
  for (const Job& j : jobs) least = std::min(least, j.weight);
  return static_cast<std::uint32_t>(std::lround(s.iterations * jobs[job].weight / least));
}

Status Check(const Scenario& s) {
  const auto bad = [](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("scenario: ", what));
  };
  if (s.workers < 1) return bad("no workers: give 1 or more");
  if (s.scheme == Scheme::kRing && s.workers < 2) return bad("a ring of 1 worker moves nothing");
  if (s.scheme == Scheme::kTree && s.workers < 2) return bad("a tree of 1 worker moves nothing");
  if (s.scheme == Scheme::kTree && s.racks != 1) {
    return bad("kTree across racks is not modelled yet: give racks = 1");
  }
  if (s.scheme == Scheme::kTree && s.max_worker_hosts < 4) {
    return bad("kTree: max_worker_hosts of 4 or more (smaller trees load their links less)");
  }
  if (s.tree_piece_bytes < 1 || s.ring_piece_bytes < 1) return bad("piece bytes: give 1 or more");
  if (s.tensors.empty()) return bad("no tensors: give the gradient's sizes");
  for (const Tensor& t : s.tensors) {
    if (t.bytes == 0) return bad("a tensor of 0 bytes");
    if (!(t.backward_seconds >= 0)) return bad("a tensor's backward time is negative");
  }
  if (!(s.link_gbps > 0)) return bad("link_gbps must be above 0");
  if (!(s.latency_us >= 0) || !(s.forward_seconds >= 0)) return bad("negative times");
  if (s.ps_cores < 1) return bad("ps_cores: give 1 or more");
  if (s.ps_hosts < 1 || s.ps_hosts > 4096) return bad("ps_hosts: give 1 to 4096");
  if (s.racks < 1 || s.workers % s.racks != 0) {
    return bad("racks: give 1 or more, dividing the workers (every rack as many)");
  }
  if (s.racks > 1 && !(s.uplink_gbps > 0)) return bad("uplink_gbps: a rack's uplink above 0");
  if (s.racks > 1 && s.scheme == Scheme::kPs && s.ps_hosts != 1 && s.ps_hosts != s.racks) {
    return bad("ps_hosts across racks: 1 (rack 0's PBox) or racks (every rack's)");
  }
  if (s.scheme == Scheme::kPsRacks && s.racks < 2) return bad("kPsRacks needs 2 racks or more");
  if (s.ps_nics < 1 || s.ps_nics > 64) return bad("ps_nics: give 1 to 64");
  if (!(s.ps_nic_gbps >= 0) || !std::isfinite(s.ps_nic_gbps)) {
    return bad("ps_nic_gbps: 0 (the network's PS link split) or a NIC's rate above 0");
  }
  if ((s.ps_nics > 1 || s.ps_nic_gbps > 0) && s.scheme != Scheme::kPs) {
    return bad("ps_nics, ps_nic_gbps: for kPs only");
  }
  if (!s.jobs.empty()) {
    if (s.scheme != Scheme::kPs || s.racks != 1) return bad("jobs: kPs in one rack only");
    if (s.jobs.size() > 64) return bad("jobs: at most 64");
    std::uint64_t workers = 0;
    for (const Job& j : s.jobs) {
      if (j.workers < 1) return bad("jobs: a job of no workers");
      if (!(j.weight >= 0.01 && j.weight <= 100)) return bad("jobs: a weight outside 0.01 to 100");
      workers += j.workers;
    }
    if (workers != s.workers) return bad("jobs: their workers must add up to workers");
    // The heaviest job's iterations: weights far apart would make it run hundreds.
    for (std::size_t j = 0; j < s.jobs.size(); ++j) {
      if (JobIterations(s, j) > 1000) return bad("jobs: weights too far apart (1000 iterations)");
    }
  }
  if (!(s.ps_pace_gbps >= 0) || !std::isfinite(s.ps_pace_gbps)) {
    return bad("ps_pace_gbps: 0 (not paced) or a rate above 0");
  }
  if (s.streaming) {
    if (s.scheme != Scheme::kPs) return bad("streaming: kPs only");
    bool compute = s.forward_seconds > 0;
    for (const Tensor& t : s.tensors) compute = compute || t.backward_seconds > 0;
    if (compute) return bad("streaming: an exchange only, no compute");
  }
  if (!(s.push_bytes_ratio > 0 && s.push_bytes_ratio <= 8)) return bad("push_bytes_ratio in (0, 8]");
  if (s.push_bytes_ratio != 1 && s.scheme != Scheme::kPs) return bad("push_bytes_ratio: kPs only");
  if (s.tensors.size() > kMostTensors) return bad("more than 65,536 tensors");
  double bytes = 0;
  for (const Tensor& t : s.tensors) bytes += static_cast<double>(t.bytes);
  if (bytes > kMostGradientBytes) return bad("a gradient above 2^43 bytes (8 TiB)");
  // Each (worker host, PS host, core) is two connections, each an actor of its own: past this
  // the simulation needs tens of GB (an actor's stack and context, ~60 KB).
  const double worker_hosts = std::min(s.workers, s.max_worker_hosts);
  const double connections =
      s.scheme == Scheme::kPsRacks
          ? 2.0 * worker_hosts * s.ps_cores + 4.0 * s.racks * s.racks  // and PBox to PBox
          : 2.0 * worker_hosts * s.ps_hosts * s.ps_cores;
  if (s.scheme != Scheme::kRing && s.scheme != Scheme::kTree && connections > kMostConnections) {
    return bad(absl::StrCat("ps_cores x PS hosts x worker hosts: ", connections,
                            " connections to simulate, at most ", kMostConnections,
                            " (fewer cores: they need not exceed the chunks)"));
  }
  if (s.chunk_bytes < 4) return bad("chunk_bytes: give 4 or more");
  if (s.iterations < 1) return bad("iterations: give 1 or more (2+: the first is not timed)");
  if (s.max_worker_hosts < 2 || s.max_chunks < 1) return bad("max_worker_hosts >= 2, max_chunks >= 1");
  const Calibration& c = s.calibration;
  if (!(c.link_goodput > 0 && c.link_goodput <= 1)) return bad("link_goodput in (0, 1]");
  if (!(c.aggregate_bytes_per_core_second > 0) || !(c.tcp_core_seconds_per_byte >= 0) ||
      !(c.verbs_core_seconds_per_byte >= 0) || !(c.message_seconds >= 0) ||
      !(c.incast_floor > 0 && c.incast_floor <= 1) || !(c.incast_slope >= 0) ||
      !(c.compute_flops_per_second > 0)) {
    return bad("a calibration constant out of range");
  }
  return absl::OkStatus();
}

}  // namespace phub::sim
