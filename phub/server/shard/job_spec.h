// Everything the shards of one job share, fixed when the last worker's Hello arrives.
// Immutable after creation; shared by pointer between the control plane and every core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "phub/kernels/aggregate_and_step.h"
#include "phub/kernels/lr_scaling.h"
#include "phub/kernels/wire_options.h"
#include "phub/keys/key_table.h"
#include "phub/server/shard/job_traffic.h"

namespace phub::server {

class ChunkRelay;        // chunk_relay.h
struct JobSnapshot;      // checkpoint_file.h
class SnapshotBuffers;  // snapshot_buffers.h

struct JobSpec {
  std::string name;  // the job's (Hello's `job`), for the shards' log lines
  keys::KeyTable table;
  std::uint32_t world_size = 0;
  kernels::OptimizerConfig optimizer;
  // A schedule (docs/design.md "Hyper-parameters per iteration"): each iteration steps with
  // `optimizer`'s kind and the values the job's ranks agreed for it (Shard::StepWith), which
  // its chunks wait for; else with `optimizer` as it is.
  bool per_iteration_values = false;
  std::uint64_t session = 0;  // random; a data connection must present it in its ATTACH
  // Priority scheduling of each data connection's WEIGHTS (SendScheduler); 0 = in order.
  std::size_t send_window_bytes = 0;
  // The format pushes arrive in, and whether the weights go back in it too (else float32).
  // (wire.error_feedback is the workers' business: unused here.)
  kernels::WireOptions wire{.weights = false};
  // The whole model's initial weights, tensors concatenated in table order, when phubd loaded
  // them from a file; empty when rank 0 sends them (INIT).
  std::vector<float> initial_weights;
  // Recovery (docs/design.md "Recovery"). keep_previous: each chunk keeps the weights of its
  // previous iteration too, so a worker that rejoins can replay the iteration in flight.
  bool keep_previous = false;
  // Every chunk is copied for a checkpoint as it completes a multiple of this; 0 = never.
  std::uint64_t checkpoint_every = 0;
  // Where those copies go, reused from checkpoint to checkpoint (null when checkpoint_every is
  // 0). Internally synchronised: the one mutable thing the job's threads share.
  std::shared_ptr<SnapshotBuffers> snapshot_buffers{};
  // The job resumes from this checkpoint (its weights, state and iterations) instead of
  // starting from initial weights; every worker then resumes at resume_iteration.
  std::shared_ptr<const JobSnapshot> resume{};
  std::uint64_t resume_iteration = 0;
  // Racks of racks (chunk_relay.h): set when the job's workers span several racks and this is
  // its part on one rack's PBox: each chunk's sum over the rack goes to `relay` (the optimizer
  // is then kAverage with copies = 1: a plain sum) and its weights come back from it. Null for
  // a job of one rack. weights_from_upstream: this rack's rank 0 sends no initial weights
  // (another rack's does; they come through the relay).
  std::shared_ptr<ChunkRelay> relay{};
  bool weights_from_upstream = false;
  // Racks of racks, a chunk's home (copy_count.h): by rank, the most workers' copies that
  // member's push may count (its rack's most workers). Non-empty only for the home part of a
  // job over racks, whose every chunk ends in its counts (kCountElements: copies and members),
  // not weights: the chunk steps its other elements with their sum over the counts of copies
  // in, and the lr scaled by the counts of members (lr_scaling).
  std::vector<std::uint32_t> most_copies{};
  // The job's bytes and aggregations per core (its per-job series); null in tests and fuzzers
  // that count nothing. Each shard writes its core's slot only.
  std::shared_ptr<JobTraffic> traffic{};
  // An elastic job (docs/design.md "Elastic jobs"): world_size is its slots, of which
  // initial_members are the members from iteration resume_iteration + 1 on; the control plane
  // changes them at iteration boundaries (Shard::ChangeMembership). With relay: a rack's part
  // whose members change (the count its sums carry follows them).
  bool elastic = false;
  std::vector<std::uint32_t> initial_members{};
  // Elastic: iteration t steps with the lr scaled by members(t) / lr_start_members
  // (kernels::ScaledLr), the lr given being the lr at lr_start_members. A home part (racks of
  // racks): members(t) is what the racks' sums count, lr_start_members the racks' start sizes
  // summed; a rack's part: kFixed (the homes scale).
  kernels::LrScaling lr_scaling = kernels::LrScaling::kFixed;
  std::uint32_t lr_start_members = 0;
  // Elastic: the batches the job took before resume_iteration + 1 (a checkpoint's, or 0).
  std::uint64_t batches_before = 0;
};

}  // namespace phub::server
