// What the gate before a job is given (admission/): the model's layout and default optimizer a
// Hello is checked against, what one job may ask for, how jobs share the PBox (tokens, weights,
// the memory budget), and the racks this phubd serves. The flags behind them are bound in
// phubd_flags.cc (--help "Jobs' model and default optimizer", "Limits and deadlines",
// "Sharing a PBox", "Racks of racks").
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "phub/kernels/aggregate_and_step.h"
#include "phub/topology/topology.h"

namespace phub::server {

// Chunk size used when --chunk-bytes is not given; chosen by measurement (docs/design.md).
inline constexpr std::uint64_t kDefaultChunkBytes = 1024 * 1024;

// What one job may ask for. Every refusal is an Error naming the limit and its flag
// (docs/operations.md "Limits"). The defaults fit a PS box serving jobs of up to a few hundred
// workers and models of up to ~100k tensors.
struct JobSizeLimits {
  // --max-world-size: jobs name their own world size (Hello); nonzero: the largest phubd
  // accepts; 0: up to --max-connections.
  std::uint32_t max_world_size = 0;
  std::uint32_t max_tensors = 100000;  // tensors in one job's table
  // Model bytes one job may ask for, with kChunkBookkeepingBytes counted per chunk; 0 until
  // Server::Start derives it from the machine's memory (DefaultMaxModelBytes).
  std::uint64_t max_model_bytes = 0;
};

// Several jobs on one PBox (docs/operations.md "Sharing a PBox").
struct SharingOptions {
  std::uint32_t max_jobs = 16;  // jobs forming or running at once
  // Jobs forming at once whose first Hello came from one address: a tenant cannot take every
  // --max-jobs place with jobs that never form.
  std::uint32_t max_forming_jobs_per_source = 4;
  // What all jobs together may hold: each job is charged its model times (world size + 3) (a
  // slot per worker, the weights, up to two optimizer state arrays) from the moment it forms
  // (all its Hellos in) to its end; a job that would pass it is refused then. 0 until
  // Server::Start derives it (80 % of memory).
  std::uint64_t memory_budget_bytes = 0;
  std::string job_token;  // contents of --token-file; empty = no token
  // --job-tokens DIR: job NAME's token is the contents of DIR/NAME, read at each first Hello
  // (job_tokens.h); a job without a file there is refused. Overrides job_token when set.
  std::string job_tokens_dir;
  // Without any token phubd serves only workers on this machine (loopback), as Redis's
  // protected mode; --allow-remote-without-token lets anyone who reaches the port join.
  bool allow_remote_without_token = false;
  // --job-weight NAME=W: the job's share of every core's sends (weighted fair queueing,
  // fair_send_queue.h); jobs not named weigh 1.
  std::map<std::string, double> job_weights;
};

// Racks of racks (--topology FILE --rack NAME, docs/operations.md "Racks of racks").
struct RacksOptions {
  // The cluster's racks; null: jobs of one rack only.
  std::shared_ptr<const topology::Topology> topology;
  std::uint32_t rack = 0;  // the rack this phubd serves, an index into topology->racks()
};

struct AdmissionOptions {
  std::uint64_t chunk_bytes = kDefaultChunkBytes;  // --chunk-bytes: every job's chunks
  kernels::OptimizerConfig optimizer;  // a job's optimizer when its Hello asks for none
  JobSizeLimits limits;
  SharingOptions sharing;
  RacksOptions racks;
};

}  // namespace phub::server
