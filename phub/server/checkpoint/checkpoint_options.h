// The checkpoint flags (--help "Checkpoints", docs/operations.md "Checkpoints"): where the
// running jobs' checkpoints go, how often, and the one a phubd starting again resumes. Read by
// job/ (writing) and the control plane (--resume); declared here, beside the files they name.
#pragma once

#include <cstdint>
#include <string>

namespace phub::server {

struct CheckpointOptions {
  std::string dir;          // --checkpoint-dir; empty: none
  std::uint64_t every = 0;  // --checkpoint-every K iterations; 0: only on SIGTERM
  std::string resume_dir;   // --resume D: each job from its folder's newest good one (D: job
                            // "default"; D/NAME: job NAME)
};

}  // namespace phub::server
