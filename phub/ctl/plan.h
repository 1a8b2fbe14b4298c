// `phubctl plan`: what a data-parallel job's iteration would take on a cluster this machine
// cannot emulate, from the simulator (phub/sim) calibrated on this project's measurements: per
// scheme, the predicted time an iteration, the bytes each worker moves, what bounds it and,
// with a model's compute (--tensors-file with FLOPs), the scaling efficiency; then the PBoxes,
// NICs and cores a rack needs for the workers' links to be the limit (plan_sizing.h), and what
// the simulator predicts with them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/ctl/plan_sizing.h"
#include "phub/sim/scenario.h"

namespace phub::ctl {

struct PlanOptions {
  std::vector<std::string> schemes = {"ps-pbox", "ps-cloud", "ring"};
  std::uint32_t workers = 4;
  double mib = 100;
  // A model's gradient and compute instead of one gradient of --mib: a tensor's bytes (and
  // backward FLOPs) a line, backward order (plan_model_file.h; bench/sim/models.py).
  std::string tensors_file;
  double gpu_tflops = 0;  // a worker's compute; 0: calibration.h's measured rate
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
  // The simulation's fidelity (sim::Scenario's): worker hosts standing for the workers, and
  // chunks past which a model's pieces grow beyond --chunk-bytes.
  std::uint32_t max_worker_hosts = 64;
  std::uint32_t max_chunks = 2048;
  double progress_seconds = 10;  // a progress line on stderr this often in a long simulation
  double nic_gbps = 100;     // sizing: the NICs a PBox is built with
  std::uint32_t max_nics = 8;  // sizing: the NICs one PBox holds (PCIe slots, NUMA nodes)
  // The PS schemes' (ps-pbox, ps-cloud, ps-multi; the others have no PS host): each PS host's
  // NICs and their rate (0: its link split), the jobs sharing it ("W[:WEIGHT],...", empty:
  // one), phubd's --nic-gbps pacing them, and a push's bytes over the weights'.
  std::uint32_t ps_nics = 1;
  double ps_nic_gbps = 0;
  std::string jobs;
  double pace_gbps = 0;
  double push_bytes_ratio = 1;
  // PS schemes: the --mib gradient in this many tensors, each pushed again as soon as its
  // weights are in (phub_exchange_worker --streams; 0: a training step's exchange).
  std::uint32_t streams = 0;
  bool json = false;
};

struct PlanRow {
  std::string scheme;
  sim::Prediction prediction;
};

struct PlanResult {
  std::vector<PlanRow> rows;
  PboxSizing sizing;
  sim::Prediction sized;  // the PS with `sizing`'s PBoxes
  double link_limit_seconds = 0;  // S over a worker's link: what a PS exchange cannot beat
};

// The scenario of `scheme` ("ps-pbox", "ps-cloud", "ps-multi", "ps-racks", "ring", "tree") under
// `options`, or InvalidArgument. Across racks ps-pbox is one PBox (rack 0's) for every rack,
// ps-multi the keys spread over every rack's PBox, ps-racks the hierarchy.
StatusOr<sim::Scenario> ScenarioFor(const std::string& scheme, const PlanOptions& options);
// Simulates every scheme, then the sized PBoxes (one child process each: simulate.h).
StatusOr<PlanResult> Plan(const PlanOptions& options);
std::string RenderPlanText(const PlanOptions& options, const PlanResult& result);
std::string RenderPlanJson(const PlanOptions& options, const PlanResult& result);
// --jobs' text, "WORKERS[:WEIGHT],..." (weight 1 where not given), or InvalidArgument naming
// --jobs and the entry.
StatusOr<std::vector<sim::Job>> ParseJobs(const std::string& text);

}  // namespace phub::ctl
