// What to simulate: a data-parallel job's gradient exchange on a cluster, as PHub runs it or as
// a ring allreduce does. Plain data; Simulate (simulate.h) turns it into a platform and actors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/sim/calibration.h"

namespace phub::sim {

enum class Scheme {
  kPs,       // PS hosts (one PBox, or ps_hosts of them): each chunk summed once and sent back
  kPsRacks,  // racks of racks: each rack's PBox sums its rack's copies, each chunk's home PBox
             // sums the racks' sums (phubd --topology; docs/design.md "Racks of racks")
  kRing,     // ring allreduce: reduce-scatter then all-gather, 2 (N - 1) steps of S / N
  kTree,     // NCCL's double binary tree: half of S reduced up and broadcast down each tree,
             // pipelined in pieces (tree_actors.h)
};

enum class Network {
  kPbox,   // each PS host's link is N x the worker's (the PBox design: a NIC port per rack share)
  kCloud,  // each PS host's link is a worker's (cloud VMs as parameter servers)
};

// A tensor the backward pass produces: its bytes and the compute before it is ready (from the
// previous tensor's, in backward order). Exchange-only scenarios give 0 compute.
struct Tensor {
  std::uint64_t bytes = 0;
  double backward_seconds = 0;
};

// A job sharing the PS hosts with others (Scenario::jobs): its workers and phubd's weight for
// it (--job-weight: its share of a core's sends while jobs share, phub/server/shard/
// fair_send_queue.h).
struct Job {
  std::uint32_t workers = 1;
  double weight = 1;
};

struct Scenario {
  Scheme scheme = Scheme::kPs;
  Network network = Network::kPbox;
  std::uint32_t workers = 2;
  // Racks of racks: `racks` racks of workers / racks each, a PBox in each (its link the rack's
  // workers' rates plus the uplink's), each rack's uplink to the core at uplink_gbps (its
  // oversubscription: workers / racks x link_gbps over it). One rack: a non-blocking switch.
  // kPs across racks serves every rack from rack 0's PBox (or, with ps_hosts = racks, from
  // every rack's: keys spread); the ring goes through the racks in order.
  std::uint32_t racks = 1;
  double uplink_gbps = 0;
  // Tensors in the order backward produces them (the last layer's first).
  std::vector<Tensor> tensors;
  double forward_seconds = 0;      // before the first tensor's backward
  double link_gbps = 1;            // each worker's link
  double latency_us = 0;           // one way, per link
  std::uint32_t ps_cores = 2;      // of each PS host
  // PS hosts (kPs): the keys spread over them (BytePS's and ps-lite's several servers; the
  // emulated racks' multips). Each has `network`'s link and ps_cores cores.
  std::uint32_t ps_hosts = 1;
  // Each PS host's NICs (kPs): its link split into ps_nics links each way, each of ps_nic_gbps
  // (0: the network's PS link over ps_nics). phubd's cores alternate over its NICs (core i on
  // NIC i % ps_nics: phub/placement/core_placement.cc with NICs of no known NUMA node), and a
  // core's connections all go through its NIC; a NIC without a core carries nothing.
  std::uint32_t ps_nics = 1;
  double ps_nic_gbps = 0;
  // Jobs sharing the PS hosts (kPs, one rack): their workers together are `workers`, each
  // job's cut from the same tensors, all jobs' chunks on the same cores. Empty: one job. A job
  // of weight w runs w / (the least weight) x iterations, so that all run to about the same
  // end, as bench/tenants runs them.
  std::vector<Job> jobs;
  // phubd's --nic-gbps: while two jobs or more share it, a PS host's sends go out no faster
  // than this, shared by weight (0: not paced). See pacing.h for how that is modelled.
  double ps_pace_gbps = 0;
  // kPs: each tensor pushed again as soon as its weights are in, no step between (a job whose
  // layers overlap perfectly: phub_exchange_worker --streams, as bench/tenants runs it); an
  // iteration is then every tensor's exchange once, and there is no compute. False: a training
  // step, every tensor pushed as backward produces it, then every weight waited for.
  bool streaming = false;
  // A push's bytes over the weights' sent back: 0.5 for bf16 pushes with fp32 weights
  // (phub_exchange_worker --wire bf16 --wire-weights fp32).
  double push_bytes_ratio = 1;
  std::uint64_t chunk_bytes = 1 << 20;
  std::uint64_t ring_piece_bytes = 1 << 20;  // phub/ring's pieces
  // The tree's pieces: NCCL's step of its SIMPLE protocol, its 4 MiB buffer (NCCL_BUFFSIZE)
  // over NCCL_STEPS = 8; each piece goes up and down the tree on its own (tree_actors.h).
  std::uint64_t tree_piece_bytes = 512 << 10;
  // kRing and kTree: the gradient is allreduced in buckets as DDP fills them (its
  // bucket_cap_mb, 25 MiB by default): tensors in backward order, a bucket closed once it holds
  // this many bytes, each bucket's allreduce started when backward has filled it and the one
  // before is done (collective_rank.h). 0: one allreduce of the whole gradient after backward.
  std::uint64_t bucket_bytes = 0;
  bool verbs = false;              // the PBox's transport: its CPU per byte received
  std::uint32_t iterations = 3;    // the first warms the pipeline; the rest are timed
  // At most this many hosts stand for the workers: identical workers are merged into groups
  // whose link and flows are the group's sum, which max-min sharing treats as the members
  // would be (see simulate.cc). Makes N = 4,096 take seconds.
  std::uint32_t max_worker_hosts = 64;
  // At most this many chunks are simulated (chunks.h): larger pieces past it.
  std::uint32_t max_chunks = 2048;
  // Long simulations show progress: every this many seconds of wall time a line on stderr
  // (the simulated time reached, the iterations done); 0: silent.
  double progress_seconds = 0;
  Calibration calibration;
};

// What a scenario's iterations take, and what bounds them.
struct Prediction {
  double seconds_per_iteration = 0;  // the median of the timed iterations
  double first_iteration_seconds = 0;
  double bytes_per_worker = 0;       // sent by one worker an iteration
  std::string bottleneck;            // the resource busiest over the timed iterations
  double bottleneck_busy = 0;        // its busy fraction, 0..1
  // A worker's forward and backward alone (the scenario's compute): an iteration's time
  // without any exchange. compute_seconds / seconds_per_iteration is the scaling efficiency
  // (weak scaling: N workers' images a second over N times one's).
  double compute_seconds = 0;
  // Scenario::jobs: each job's median time an iteration over its timed iterations that ended
  // while every job still ran (the window bench/tenants/shares.py measures shares in); one
  // entry (seconds_per_iteration) for one job. seconds_per_iteration is then the slowest's.
  std::vector<double> job_seconds_per_iteration;
};

// The scenario's jobs: Scenario::jobs, or one job of every worker.
std::vector<Job> JobsOf(const Scenario& scenario);
// Job j's iterations: Scenario::iterations x its weight over the least weight, rounded.
std::uint32_t JobIterations(const Scenario& scenario, std::size_t job);

// What one simulation may hold: tensors, a gradient's bytes, and the PS's connections (each an
// actor; 100,000 of them take ~6 GB).
inline constexpr std::size_t kMostTensors = 65536;
inline constexpr double kMostGradientBytes = 8.0 * (1ull << 40);
inline constexpr double kMostConnections = 100000;

// InvalidArgument naming the field for what no simulation can mean (no workers, no tensor).
Status Check(const Scenario& scenario);

}  // namespace phub::sim
