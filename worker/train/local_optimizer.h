// The optimizer for single-worker runs: phub/kernels' AggregateAndStep with one input, the very
// code phubd runs on the PS (in distributed runs the PS applies it and the worker does not).
// Host parameters only (the CUDA backend will step on the device in its own issue).
#pragma once

#include <cstdint>
#include <vector>

#include "phub/kernels/aggregate_and_step.h"
#include "worker/nn/layer.h"

namespace phub::worker {

class LocalOptimizer {
 public:
  // Validates the config (std::invalid_argument with phub::kernels::Validate's message).
  LocalOptimizer(std::vector<Parameter*> params, const kernels::OptimizerConfig& config);
  // One step from every parameter's current gradient.
  void Step();
  std::uint64_t steps() const { return step_; }

 private:
  std::vector<Parameter*> params_;
  kernels::OptimizerConfig config_;
  std::vector<std::vector<std::vector<float>>> state_;  // [parameter][state array][element]
  std::uint64_t step_ = 0;
};

}  // namespace phub::worker
