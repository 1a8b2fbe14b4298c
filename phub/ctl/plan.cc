#include "phub/ctl/plan.h"

#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "phub/ctl/json_text.h"
#include "phub/sim/simulate.h"

namespace phub::ctl {

StatusOr<sim::Scenario> ScenarioFor(const std::string& scheme, const PlanOptions& o) {
  sim::Scenario s;
  s.racks = o.racks;
  s.uplink_gbps = o.uplink_gbps;
  if (scheme == "ps-pbox" || scheme == "ps-cloud" || scheme == "ps-multi") {
    s.scheme = sim::Scheme::kPs;
    s.network = scheme == "ps-cloud" || (scheme == "ps-multi" && o.racks == 1)
                    ? sim::Network::kCloud
                    : sim::Network::kPbox;
    if (scheme == "ps-multi") s.ps_hosts = o.racks > 1 ? o.racks : o.ps_hosts;
  } else if (scheme == "ps-racks") {
    s.scheme = sim::Scheme::kPsRacks;
  } else if (scheme == "ring") {
    s.scheme = sim::Scheme::kRing;
  } else if (scheme == "tree") {
    s.scheme = sim::Scheme::kTree;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheme '", scheme, "': give ps-pbox (a PBox with a link of N workers' rate), ps-cloud "
        "(a parameter server with one worker's link), ps-multi (--ps-hosts servers, each with "
        "one worker's link; across racks every rack's PBox), ps-racks (racks of racks: each "
        "rack's PBox, then each chunk's home), ring or tree (NCCL's double binary tree)"));
  }
  if (!o.tensors_file.empty()) {
    PHUB_ASSIGN_OR_RETURN(s.tensors, ReadTensorsFile(o.tensors_file));
  } else if (!(o.mib > 0) || !std::isfinite(o.mib) || o.mib > 1e7) {
    return absl::InvalidArgumentError("--mib: give the gradient's size, above 0 and at most 1e7");
  } else {
    s.tensors = {{static_cast<std::uint64_t>(o.mib * (1 << 20)), 0}};
  }
  if (!(o.bucket_mib >= 0) || !std::isfinite(o.bucket_mib) || o.bucket_mib > 1e6) {
    return absl::InvalidArgumentError(
        "--bucket-mib: give DDP's bucket_cap_mb, 0 (one allreduce after backward) to 1e6");
  }
  s.bucket_bytes = static_cast<std::uint64_t>(o.bucket_mib * (1 << 20));
  s.workers = o.workers;
  s.link_gbps = o.gbps;
  s.latency_us = o.latency_us;
  s.ps_cores = o.ps_cores;
  s.chunk_bytes = o.chunk_bytes;
  s.iterations = o.iterations;
  s.verbs = o.verbs;
  PHUB_RETURN_IF_ERROR(sim::Check(s));
  return s;
}

StatusOr<std::vector<sim::Tensor>> ReadTensorsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tensors-file ", path, ": cannot be read (give a file of one tensor's "
                     "bytes a line, backward order)"));
  }
  constexpr std::size_t kMostTensors = 1 << 20;
  std::vector<sim::Tensor> tensors;
  std::string line;
  for (std::size_t number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::uint64_t bytes = 0;
    if (!absl::SimpleAtoi(line, &bytes) || bytes == 0 || bytes > (std::uint64_t{1} << 40)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tensors-file ", path, " line ", number, ": '", line.substr(0, 40),
                       "' is not a tensor's size in bytes (1 to 2^40)"));
    }
    if (tensors.size() == kMostTensors) {
      return absl::InvalidArgumentError(absl::StrCat("--tensors-file ", path, ": more than ",
                                                     kMostTensors, " tensors"));
    }
    tensors.push_back({bytes, 0});
  }
  if (tensors.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("--tensors-file ", path, ": no tensors"));
  }
  return tensors;
}

StatusOr<std::vector<PlanRow>> Plan(const PlanOptions& o) {
  std::vector<PlanRow> rows;
  for (const std::string& scheme : o.schemes) {
    PHUB_ASSIGN_OR_RETURN(const sim::Scenario s, ScenarioFor(scheme, o));
    PHUB_ASSIGN_OR_RETURN(sim::Prediction p, sim::Simulate(s));
    rows.push_back({scheme, std::move(p)});
  }
  return rows;
}

std::string RenderPlanText(const PlanOptions& o, const std::vector<PlanRow>& rows) {
  std::string out = absl::StrFormat(
      "%u workers, a gradient of %s, %g Gbit/s links, PBox of %u cores (%s)", o.workers,
      o.tensors_file.empty() ? absl::StrCat(o.mib, " MiB") : o.tensors_file, o.gbps, o.ps_cores, o.verbs ? "verbs" : "TCP");
  if (o.racks > 1) {
    out += absl::StrFormat("; %u racks of %u, uplinks %g Gbit/s (%.3g:1)", o.racks,
                           o.workers / o.racks, o.uplink_gbps,
                           o.workers / o.racks * o.gbps / o.uplink_gbps);
  }
  out += "\n";
  out += absl::StrFormat("%-10s %14s %16s  %s\n", "scheme", "ms/iteration", "MB/worker", "bound by");
  for (const PlanRow& r : rows) {
    out += absl::StrFormat("%-10s %14.1f %16.1f  %s (%.0f %% busy)\n", r.scheme,
                           1000 * r.prediction.seconds_per_iteration,
                           r.prediction.bytes_per_worker / 1e6, r.prediction.bottleneck,
                           100 * r.prediction.bottleneck_busy);
  }
  return out;
}

std::string RenderPlanJson(const PlanOptions& o, const std::vector<PlanRow>& rows) {
  std::string out = absl::StrCat("{\"workers\": ", o.workers, ", \"mib\": ", JsonNumber(o.mib),
                                 ", \"gbps\": ", JsonNumber(o.gbps), ", \"schemes\": [");
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const sim::Prediction& p = rows[i].prediction;
    absl::StrAppend(&out, i ? ", " : "", "{\"scheme\": ", JsonString(rows[i].scheme),
                    ", \"seconds_per_iteration\": ", JsonNumber(p.seconds_per_iteration),
                    ", \"first_iteration_seconds\": ", JsonNumber(p.first_iteration_seconds),
                    ", \"bytes_per_worker\": ", JsonNumber(p.bytes_per_worker),
                    ", \"bottleneck\": ", JsonString(p.bottleneck),
                    ", \"bottleneck_busy\": ", JsonNumber(p.bottleneck_busy), "}");
  }
  out += "]}\n";
  return out;
}

}  // namespace phub::ctl
