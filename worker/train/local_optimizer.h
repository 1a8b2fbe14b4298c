// The optimizer for single-worker runs: phub/kernels' AggregateAndStep with one input, the very
// equations phubd runs on the PS (in distributed runs the PS applies it and the worker does
// not), stepped where the parameters live through Backend::OptimizerStep: on the CPU the PS's
// own kernel, on a GPU a device kernel of the same per-element code
// (phub/kernels/optimizer_update.h), so the weights never cross PCIe.
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
  // Validates the config (InvalidArgument with phub::kernels::Validate's message) and makes the
  // optimizer state, zero, on each parameter's device. `backend` is the one the parameters live
  // on; it and the parameters must outlive the optimizer.
  static StatusOr<std::unique_ptr<LocalOptimizer>> Create(std::vector<Parameter*> params,
                                                          const kernels::OptimizerConfig& config,
                                                          Backend& backend);
  // A schedule: the values the next Steps use (the kind stays the config's). InvalidArgument
  // for values that kind refuses (kernels::ValidateStepValues), which leaves the last ones.
  Status SetValues(const kernels::StepValues& values);
  // One step from every parameter's current gradient (asynchronous on a GPU: the backend's
  // next synchronisation reports a failure).
  Status Step();
  std::uint64_t steps() const { return step_; }

 private:
  LocalOptimizer(std::vector<Parameter*> params, const kernels::OptimizerConfig& config,
                 Backend& backend)
      : params_(std::move(params)), config_(config), backend_(backend) {}

  std::vector<Parameter*> params_;
  kernels::OptimizerConfig config_;
  Backend& backend_;
  std::vector<std::vector<Tensor>> state_;  // [parameter][state array], on its device
  std::uint64_t step_ = 0;
};

}  // namespace phub::worker
