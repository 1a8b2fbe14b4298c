#include "worker/train/local_optimizer.h"

#include <string>

namespace phub::worker {

StatusOr<std::unique_ptr<LocalOptimizer>> LocalOptimizer::Create(
    std::vector<Parameter*> params, const kernels::OptimizerConfig& config, Backend& backend) {
  PHUB_RETURN_IF_ERROR(kernels::Validate(config));
  std::unique_ptr<LocalOptimizer> o(new LocalOptimizer(std::move(params), config, backend));
  const int arrays = kernels::StateArrays(config.kind);
  for (Parameter* p : o->params_) {
    const bool on_device = p->value.device() != Device::kCpu;
    Tensor value, grad;  // host mirrors of a device parameter (else undefined)
    if (on_device) {
      PHUB_ASSIGN_OR_RETURN(value, Tensor::Allocate(p->value.shape()));
      PHUB_ASSIGN_OR_RETURN(grad, Tensor::Allocate(p->value.shape()));
      PHUB_RETURN_IF_ERROR(backend.CopyToHost(p->value, value));
    }
    o->host_value_.push_back(std::move(value));
    o->host_grad_.push_back(std::move(grad));
    o->state_.emplace_back(arrays,
                           std::vector<float>(static_cast<std::size_t>(p->value.numel()), 0));
  }
  return o;
}

Status LocalOptimizer::Step() {
  ++step_;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Parameter& p = *params_[k];
    const bool on_device = host_value_[k].defined();
    // The host copy of a device parameter's weights stays current: only this class writes them.
    if (on_device) PHUB_RETURN_IF_ERROR(backend_.CopyToHost(p.grad, host_grad_[k]));
    const float* grad = on_device ? host_grad_[k].data() : p.grad.data();
    std::vector<float*> state;
    for (auto& s : state_[k]) state.push_back(s.data());
    kernels::AggregateAndStep(std::span<const float* const>(&grad, 1),
                              on_device ? host_value_[k].span() : p.value.span(), state, config_,
                              step_);
    if (on_device) PHUB_RETURN_IF_ERROR(backend_.CopyFromHost(host_value_[k], p.value));
  }
  return absl::OkStatus();
}

}  // namespace phub::worker
