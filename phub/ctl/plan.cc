#include "phub/ctl/plan.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "phub/ctl/json_text.h"
#include "phub/ctl/plan_model_file.h"
#include "phub/sim/platform.h"
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
  if (o.gpu_tflops > 0) s.calibration.compute_flops_per_second = o.gpu_tflops * 1e12;
  if (!o.tensors_file.empty()) {
    PHUB_ASSIGN_OR_RETURN(ModelFile model, ReadTensorsFile(o.tensors_file,
                                                           s.calibration.compute_flops_per_second));
    s.tensors = std::move(model.tensors);
    s.forward_seconds = model.forward_seconds;
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
  s.max_worker_hosts = o.max_worker_hosts;
  s.max_chunks = o.max_chunks;
  s.progress_seconds = o.progress_seconds;
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

StatusOr<PlanResult> Plan(const PlanOptions& o) {
  PlanResult result;
  for (const std::string& scheme : o.schemes) {
    PHUB_ASSIGN_OR_RETURN(const sim::Scenario s, ScenarioFor(scheme, o));
    PHUB_ASSIGN_OR_RETURN(sim::Prediction p, sim::Simulate(s));
    result.rows.push_back({scheme, std::move(p)});
  }
  PHUB_ASSIGN_OR_RETURN(const sim::Scenario base, ScenarioFor("ps-pbox", o));
  result.sizing = SizePboxes(o, base.calibration);
  PHUB_ASSIGN_OR_RETURN(result.sized, sim::Simulate(SizedScenario(base, result.sizing)));
  double bytes = 0;
  for (const sim::Tensor& t : base.tensors) bytes += static_cast<double>(t.bytes);
  result.link_limit_seconds = bytes / sim::WorkerBytesPerSecond(base);  // its goodput's
  return result;
}

namespace {

// With compute: the efficiency and the exchange's time not hidden behind the compute.
std::string WithCompute(const sim::Prediction& p) {
  return absl::StrFormat("%11.2f %12.1f", p.compute_seconds / p.seconds_per_iteration,
                         1000 * (p.seconds_per_iteration - p.compute_seconds));
}

}  // namespace

std::string RenderPlanText(const PlanOptions& o, const PlanResult& result) {
  std::string out = absl::StrFormat(
      "%u workers, a gradient of %s, %g Gbit/s links, PBox of %u cores (%s)", o.workers,
      o.tensors_file.empty() ? absl::StrCat(o.mib, " MiB") : o.tensors_file, o.gbps, o.ps_cores, o.verbs ? "verbs" : "TCP");
  if (o.racks > 1) {
    out += absl::StrFormat("; %u racks of %u, uplinks %g Gbit/s (%.3g:1)", o.racks,
                           o.workers / o.racks, o.uplink_gbps,
                           o.workers / o.racks * o.gbps / o.uplink_gbps);
  }
  out += "\n";
  const double compute = result.sized.compute_seconds;
  if (compute > 0) {
    out += absl::StrFormat("a worker's compute alone: %.1f ms an iteration; efficiency: that over "
                           "the iteration; exposed: the exchange's time not hidden by it\n",
                           1000 * compute);
  }
  out += absl::StrFormat("%-10s %14s %16s%s  %s\n", "scheme", "ms/iteration", "MB/worker",
                         compute > 0 ? absl::StrFormat(" %11s %12s", "efficiency", "exposed ms") : "",
                         "busiest");
  for (const PlanRow& r : result.rows) {
    const sim::Prediction& p = r.prediction;
    out += absl::StrFormat("%-10s %14.1f %16.1f%s  %s (%.0f %% busy)\n", r.scheme,
                           1000 * p.seconds_per_iteration, p.bytes_per_worker / 1e6,
                           compute > 0 ? " " + WithCompute(p) : "", p.bottleneck,
                           100 * p.bottleneck_busy);
    const std::vector<double>& jobs = p.job_seconds_per_iteration;
    for (std::size_t j = 0; jobs.size() > 1 && j < jobs.size(); ++j) {
      out += absl::StrFormat("%-10s %14.1f  job %u of %u (--jobs)\n", "", 1000 * jobs[j], j,
                             jobs.size());
    }
  }
  const PboxSizing& z = result.sizing;
  const sim::Prediction& sized = result.sized;
  out += absl::StrFormat(
      "\nFor the workers' links to be the limit (%g Gbit/s a rack%s): %u PBox%s a rack, each "
      "with %u NIC%s of %g Gbit/s and %u core%s (%s; a core at most %.0f %% busy).\n",
      z.rack_gbps, o.racks > 1 ? ", its uplink included" : "", z.pboxes_per_rack,
      z.pboxes_per_rack == 1 ? "" : "es", z.nics, z.nics == 1 ? "" : "s", z.nic_gbps, z.cores,
      z.cores == 1 ? "" : "s", o.verbs ? "verbs" : "TCP", 100 * kBusiestCore);
  if (compute > 0) {
    out += absl::StrFormat(
        "Predicted with them: %.1f ms an iteration, efficiency %.2f, the exchange exposed %.1f ms "
        "(S / B = %.1f ms); busiest: %s.\n",
        1000 * sized.seconds_per_iteration, compute / sized.seconds_per_iteration,
        1000 * (sized.seconds_per_iteration - compute), 1000 * result.link_limit_seconds,
        sized.bottleneck);
  } else {
    out += absl::StrFormat(
        "Predicted with them: %.1f ms an iteration, %.2f x the link limit (S / B = %.1f ms); "
        "busiest: %s.\n",
        1000 * sized.seconds_per_iteration,
        sized.seconds_per_iteration / result.link_limit_seconds,
        1000 * result.link_limit_seconds, sized.bottleneck);
  }
  return out;
}

std::string RenderPlanJson(const PlanOptions& o, const PlanResult& result) {
  const std::vector<PlanRow>& rows = result.rows;
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
                    ", \"compute_seconds\": ", JsonNumber(p.compute_seconds),
                    ", \"job_seconds_per_iteration\": [");
    for (std::size_t j = 0; j < p.job_seconds_per_iteration.size(); ++j) {
      absl::StrAppend(&out, j ? ", " : "", JsonNumber(p.job_seconds_per_iteration[j]));
    }
    out += "]}";
  }
  const PboxSizing& z = result.sizing;
  absl::StrAppend(&out, "], \"sizing\": {\"pboxes_per_rack\": ", z.pboxes_per_rack,
                  ", \"nics\": ", z.nics, ", \"nic_gbps\": ", JsonNumber(z.nic_gbps),
                  ", \"cores\": ", z.cores, ", \"rack_gbps\": ", JsonNumber(z.rack_gbps),
                  ", \"seconds_per_iteration\": ", JsonNumber(result.sized.seconds_per_iteration),
                  ", \"link_limit_seconds\": ", JsonNumber(result.link_limit_seconds),
                  ", \"compute_seconds\": ", JsonNumber(result.sized.compute_seconds),
                  ", \"bottleneck\": ", JsonString(result.sized.bottleneck), "}}\n");
  return out;
}

}  // namespace phub::ctl
