// Everything the shards of one job share, fixed when the last worker's Hello arrives.
// Immutable after creation; shared by pointer between the control plane and every core.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "phub/kernels/aggregate_and_step.h"
#include "phub/keys/key_table.h"

namespace phub::server {

struct JobSpec {
  keys::KeyTable table;
  std::uint32_t world_size = 0;
  kernels::OptimizerConfig optimizer;
  std::uint64_t session = 0;  // random; a data connection must present it in its ATTACH
  // The whole model's initial weights, tensors concatenated in table order, when phubd loaded
  // them from a file; empty when rank 0 sends them (INIT).
  std::vector<float> initial_weights;
};

}  // namespace phub::server
