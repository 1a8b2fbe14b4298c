// The optimizer for single-worker runs: phub/kernels' AggregateAndStep with one input, the very
// code phubd runs on the PS (in distributed runs the PS applies it and the worker does not).
// Parameters on a GPU are stepped through host copies (gradient down, weights up, through the
// Backend): still that one implementation, at the price of two PCIe copies per step; a device
// kernel is for when single-GPU training speed matters (distributed runs step on the PS).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "phub/common/status.h"
#include "phub/kernels/aggregate_and_step.h"
#include "worker/nn/layer.h"

namespace phub::worker {

class LocalOptimizer {
 public:
  // Validates the config (InvalidArgument with phub::kernels::Validate's message) and copies
  // device parameters' weights to their host mirrors. `backend` is the one the parameters live
  // on; it and the parameters must outlive the optimizer.
  static StatusOr<std::unique_ptr<LocalOptimizer>> Create(std::vector<Parameter*> params,
                                                          const kernels::OptimizerConfig& config,
                                                          Backend& backend);
  // One step from every parameter's current gradient (the backend's copy errors, if any).
  Status Step();
  std::uint64_t steps() const { return step_; }

 private:
  LocalOptimizer(std::vector<Parameter*> params, const kernels::OptimizerConfig& config,
                 Backend& backend)
      : params_(std::move(params)), config_(config), backend_(backend) {}

  std::vector<Parameter*> params_;
  kernels::OptimizerConfig config_;
  Backend& backend_;
  std::vector<Tensor> host_value_, host_grad_;  // staging for device parameters (else empty)
  std::vector<std::vector<std::vector<float>>> state_;  // [parameter][state array][element]
  std::uint64_t step_ = 0;
};

}  // namespace phub::worker
