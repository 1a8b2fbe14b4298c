#include "worker/train/local_optimizer.h"

namespace phub::worker {

StatusOr<std::unique_ptr<LocalOptimizer>> LocalOptimizer::Create(
    std::vector<Parameter*> params, const kernels::OptimizerConfig& config, Backend& backend) {
  PHUB_RETURN_IF_ERROR(kernels::Validate(config));
  std::unique_ptr<LocalOptimizer> o(new LocalOptimizer(std::move(params), config, backend));
  const int arrays = kernels::StateArrays(config.kind);
  for (Parameter* p : o->params_) {
    std::vector<Tensor> state;
    if (arrays > 0) {
      const Tensor zeros = Tensor::Zeros(p->value.shape());
      for (int a = 0; a < arrays; ++a) {
        PHUB_ASSIGN_OR_RETURN(Tensor s, backend.Allocate(p->value.shape()));
        PHUB_RETURN_IF_ERROR(backend.CopyFromHost(zeros, s));
        state.push_back(std::move(s));
      }
    }
    o->state_.push_back(std::move(state));
  }
  // The copies read `zeros` asynchronously on a GPU: done before it goes.
  PHUB_RETURN_IF_ERROR(backend.Synchronize());
  return o;
}

Status LocalOptimizer::SetValues(const kernels::StepValues& values) {
  PHUB_RETURN_IF_ERROR(kernels::ValidateStepValues(config_.kind, values));
  config_ = kernels::WithValues(config_, values);
  return absl::OkStatus();
}

Status LocalOptimizer::Step() {
  ++step_;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Parameter& p = *params_[k];
    PHUB_RETURN_IF_ERROR(backend_.OptimizerStep(p.grad, p.value, state_[k], config_, step_));
  }
  return absl::OkStatus();
}

}  // namespace phub::worker
