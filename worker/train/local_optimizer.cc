#include "worker/train/local_optimizer.h"

#include <stdexcept>
#include <string>

namespace phub::worker {

LocalOptimizer::LocalOptimizer(std::vector<Parameter*> params,
                               const kernels::OptimizerConfig& config, Backend& backend)
    : params_(std::move(params)), config_(config), backend_(backend) {
  if (auto status = kernels::Validate(config); !status.ok()) {
    throw std::invalid_argument(std::string(status.message()));
  }
  const int arrays = kernels::StateArrays(config.kind);
  for (Parameter* p : params_) {
    const bool on_device = p->value.device() != Device::kCpu;
    host_value_.push_back(on_device ? Tensor::Empty(p->value.shape()) : Tensor());
    host_grad_.push_back(on_device ? Tensor::Empty(p->value.shape()) : Tensor());
    if (on_device) backend_.CopyToHost(p->value, host_value_.back());
    state_.emplace_back(arrays, std::vector<float>(static_cast<std::size_t>(p->value.numel()), 0));
  }
}

void LocalOptimizer::Step() {
  ++step_;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    Parameter& p = *params_[k];
    const bool on_device = host_value_[k].defined();
    // The host copy of a device parameter's weights stays current: only this class writes them.
    if (on_device) backend_.CopyToHost(p.grad, host_grad_[k]);
    const float* grad = on_device ? host_grad_[k].data() : p.grad.data();
    std::vector<float*> state;
    for (auto& s : state_[k]) state.push_back(s.data());
    kernels::AggregateAndStep(std::span<const float* const>(&grad, 1),
                              on_device ? host_value_[k].span() : p.value.span(), state, config_,
                              step_);
    if (on_device) backend_.CopyFromHost(host_value_[k], p.value);
  }
}

}  // namespace phub::worker
