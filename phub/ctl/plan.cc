#include "phub/ctl/plan.h"

#include <cmath>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
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
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "scheme '", scheme, "': give ps-pbox (a PBox with a link of N workers' rate), ps-cloud "
        "(a parameter server with one worker's link), ps-multi (--ps-hosts servers, each with "
        "one worker's link; across racks every rack's PBox), ps-racks (racks of racks: each "
        "rack's PBox, then each chunk's home) or ring"));
  }
  if (!o.tensors_file.empty()) {
    PHUB_ASSIGN_OR_RETURN(s.tensors, ReadTensorsFile(o.tensors_file));
  } else if (!(o.mib > 0) || !std::isfinite(o.mib) || o.mib > 1e7) {
    return absl::InvalidArgumentError("--mib: give the gradient's size, above 0 and at most 1e7");
  } else {
    s.tensors = {{static_cast<std::uint64_t>(o.mib * (1 << 20)), 0}};
  }
  s.workers = o.workers;
  s.link_gbps = o.gbps;
  s.latency_us = o.latency_us;
  s.ps_cores = o.ps_cores;
  s.chunk_bytes = o.chunk_bytes;
  s.iterations = o.iterations;
  s.verbs = o.verbs;
  if (s.scheme == sim::Scheme::kPs) {
    s.ps_nics = o.ps_nics;
    s.ps_nic_gbps = o.ps_nic_gbps;
    s.ps_pace_gbps = o.pace_gbps;
    s.push_bytes_ratio = o.push_bytes_ratio;
    if (o.streams > 0) {
      if (!o.tensors_file.empty()) {
        return absl::InvalidArgumentError("--streams: with --mib only (not --tensors-file)");
      }
      // As phub_exchange_worker cuts its tensor: K pieces of floats, the last ones larger.
      const std::uint64_t floats = s.tensors[0].bytes / 4;
      if (floats < o.streams) return absl::InvalidArgumentError("--streams: more than --mib's floats");
      s.tensors.clear();
      for (std::uint64_t k = 0; k < o.streams; ++k) {
        s.tensors.push_back({4 * (floats * (k + 1) / o.streams - floats * k / o.streams), 0});
      }
      s.streaming = true;
    }
    if (!o.jobs.empty()) {
      PHUB_ASSIGN_OR_RETURN(s.jobs, ParseJobs(o.jobs));
      std::uint64_t workers = 0;
      for (const sim::Job& j : s.jobs) workers += j.workers;
      if (workers != o.workers) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--jobs '", o.jobs, "': their workers add up to ", workers, ", not --workers ",
            o.workers));
      }
      if (o.racks != 1) return absl::InvalidArgumentError("--jobs: in one rack only (--racks 1)");
    }
  }
  PHUB_RETURN_IF_ERROR(sim::Check(s));
  return s;
}

StatusOr<std::vector<sim::Job>> ParseJobs(const std::string& text) {
  std::vector<sim::Job> jobs;
  for (const absl::string_view entry : absl::StrSplit(text, ',')) {
    const std::vector<absl::string_view> parts = absl::StrSplit(entry, ':');
    sim::Job job;
    if (parts.size() > 2 || !absl::SimpleAtoi(parts[0], &job.workers) || job.workers < 1 ||
        (parts.size() == 2 &&
         (!absl::SimpleAtod(parts[1], &job.weight) || !(job.weight >= 0.01 && job.weight <= 100)))) {
      return absl::InvalidArgumentError(
          absl::StrCat("--jobs entry '", entry.substr(0, 40),
                       "': give WORKERS[:WEIGHT] (workers 1 or more, a weight from 0.01 to 100)"));
    }
    if (jobs.size() == 64) return absl::InvalidArgumentError("--jobs: at most 64 jobs");
    jobs.push_back(job);
  }
  return jobs;
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
    const std::vector<double>& jobs = r.prediction.job_seconds_per_iteration;
    for (std::size_t j = 0; jobs.size() > 1 && j < jobs.size(); ++j) {
      out += absl::StrFormat("%-10s %14.1f  job %u of %u (--jobs)\n", "", 1000 * jobs[j], j,
                             jobs.size());
    }
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
                    ", \"bottleneck_busy\": ", JsonNumber(p.bottleneck_busy),
                    ", \"job_seconds_per_iteration\": [");
    for (std::size_t j = 0; j < p.job_seconds_per_iteration.size(); ++j) {
      absl::StrAppend(&out, j ? ", " : "", JsonNumber(p.job_seconds_per_iteration[j]));
    }
    out += "]}";
  }
  out += "]}\n";
  return out;
}

}  // namespace phub::ctl
