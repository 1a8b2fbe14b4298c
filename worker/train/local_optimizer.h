// The optimizer for single-worker runs: phub/kernels' AggregateAndStep with one input, the very
// code phubd runs on the PS (in distributed runs the PS applies it and the worker does not).
// Parameters on a GPU are stepped through host copies (gradient down, weights up, through the
// Backend): still that one implementation, at the price of two PCIe copies per step; a device
// kernel is for when single-GPU training speed matters (distributed runs step on the PS).
#pragma once

#include <cstdint>
#include <vector>

#include "phub/kernels/aggregate_and_step.h"
#include "worker/nn/layer.h"

namespace phub::worker {

class LocalOptimizer {
 public:
  // Validates the config (std::invalid_argument with phub::kernels::Validate's message).
  // `backend` is the one the parameters live on.
  LocalOptimizer(std::vector<Parameter*> params, const kernels::OptimizerConfig& config,
                 Backend& backend);
  // One step from every parameter's current gradient.
  void Step();
  std::uint64_t steps() const { return step_; }

 private:
  std::vector<Parameter*> params_;
  kernels::OptimizerConfig config_;
  Backend& backend_;
  std::vector<Tensor> host_value_, host_grad_;  // staging for device parameters (else empty)
  std::vector<std::vector<std::vector<float>>> state_;  // [parameter][state array][element]
  std::uint64_t step_ = 0;
};

}  // namespace phub::worker
