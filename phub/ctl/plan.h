// `phubctl plan`: what a data-parallel job's exchange would take on a cluster this machine
// cannot emulate, from the simulator (phub/sim) calibrated on this project's measurements: per
// scheme, the predicted time an iteration, the bytes each worker moves, and the resource that
// bounds it. This first version takes one gradient of S MiB (bench/exchange's shape) and the
// single-rack schemes; docs/design.md "The simulator" says what is still to come.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/sim/scenario.h"

namespace phub::ctl {

struct PlanOptions {
  std::vector<std::string> schemes = {"ps-pbox", "ps-cloud", "ring"};
  std::uint32_t workers = 4;
  double mib = 100;
  // A model's gradient instead of one of --mib: one tensor's bytes a line, in the order
  // backward produces them (bench/sim/models.py writes them for ResNet-50, BERT-large, ...).
  std::string tensors_file;
  double gbps = 1;
  double latency_us = 0;
  std::uint32_t ps_cores = 2;
  std::uint32_t ps_hosts = 2;  // ps-multi's, in one rack
  std::uint32_t racks = 1;
  double uplink_gbps = 0;  // each rack's, with racks > 1
  std::uint64_t chunk_bytes = 1 << 20;
  // ring and tree: the gradient allreduced in buckets of this many MiB as backward fills them
  // (DDP's bucket_cap_mb and its default); 0: one allreduce of the whole gradient.
  double bucket_mib = 25;
  std::uint32_t iterations = 3;
  bool verbs = false;
  bool json = false;
};

struct PlanRow {
  std::string scheme;
  sim::Prediction prediction;
};

// The scenario of `scheme` ("ps-pbox", "ps-cloud", "ps-multi", "ps-racks", "ring", "tree") under
// `options`, or InvalidArgument. Across racks ps-pbox is one PBox (rack 0's) for every rack,
// ps-multi the keys spread over every rack's PBox, ps-racks the hierarchy.
StatusOr<sim::Scenario> ScenarioFor(const std::string& scheme, const PlanOptions& options);
// The tensors of `path` (one size in bytes a line), or InvalidArgument naming the line.
StatusOr<std::vector<sim::Tensor>> ReadTensorsFile(const std::string& path);
// Simulates every scheme (one child process each: simulate.h).
StatusOr<std::vector<PlanRow>> Plan(const PlanOptions& options);
std::string RenderPlanText(const PlanOptions& options, const std::vector<PlanRow>& rows);
std::string RenderPlanJson(const PlanOptions& options, const std::vector<PlanRow>& rows);

}  // namespace phub::ctl
