// What a job is given of phubd's flags beyond admission's and the data plane's (job.h Host):
// its phases' deadlines, its checkpoints, and the initial weights file (--help "Limits and
// deadlines", "Checkpoints", "Jobs' model and default optimizer").
#pragma once

#include <string>

#include "phub/server/checkpoint/checkpoint_options.h"

namespace phub::server {

// How long members may hold a job in each phase (docs/operations.md "Limits").
struct JobDeadlines {
  int form_timeout_ms = 120000;  // a job must have all its workers this long after the first
  // Every member must be attached to every core this long after the job's Welcome, or the job
  // stalls; each core also closes a data connection that has not ATTACHed by then.
  int attach_timeout_ms = 10000;
  int stalled_job_timeout_ms = 30000;  // a stalled job's members still connected are then closed
  int leave_timeout_ms = 300000;  // after a member's Goodbye, the others must have left by then
  // A member lost mid-job may say Hello again (same rank) this long; 0: the job stalls at once.
  int rejoin_timeout_ms = 60000;
  // A member of a running job heard from (any message, Heartbeats every quarter of it) less
  // recently than this is lost; 0: no heartbeats. Workers apply phubd's value to phubd.
  int liveness_timeout_ms = 10000;
  // An elastic job that stalled: a new job under its name is refused this long
  // (admission/stalled_names.h); 0: never.
  int stalled_name_memory_ms = 600000;
};

struct JobOptions {
  JobDeadlines deadlines;
  CheckpointOptions checkpoint;
  std::string initial_weights_path;  // --init-weights: raw float32; empty = rank 0 sends them
  // --test-install-delay-ms (hidden; tests only): each core's install of a job's shard waits
  // this long first, standing in for the seconds a large model's install takes.
  int test_install_delay_ms = 0;
};

}  // namespace phub::server
