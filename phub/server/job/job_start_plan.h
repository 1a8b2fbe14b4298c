// Job::StartPlan: what a job's start builds before its shards are installed (job_start.cc), and
// what the start goes on with once they are (job_install.cc). Private to phub/server/job/.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "phub/server/job/job.h"

namespace phub::server {

// What the steps build before anything is installed.
struct Job::StartPlan {
  // --resume's checkpoint, when this part resumes it (a rack's part resumes nothing).
  std::shared_ptr<const JobSnapshot> resume;
  kernels::OptimizerConfig optimizer;  // the job's (CheckHello: valid, every member's)
  std::uint64_t session = 0;           // the job's secret on the data plane
  bool checkpointing = false;          // --checkpoint-dir, and a part that steps
  std::optional<keys::KeyTable> table{};
  std::vector<float> initial_weights{};  // --init-weights; empty: rank 0 sends them
  std::shared_ptr<Uplink> uplink{};      // a rack's part's relay, or null
  std::shared_ptr<JobSpec> spec{};
  proto::Hello hello{};  // the job's (rank 0's; CheckHello: every member's agrees)
};

}  // namespace phub::server
