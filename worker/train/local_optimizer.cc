#include "worker/train/local_optimizer.h"

#include <stdexcept>
#include <string>

namespace phub::worker {

LocalOptimizer::LocalOptimizer(std::vector<Parameter*> params,
                               const kernels::OptimizerConfig& config)
    : params_(std::move(params)), config_(config) {
  if (auto status = kernels::Validate(config); !status.ok()) {
    throw std::invalid_argument(std::string(status.message()));
  }
  const int arrays = kernels::StateArrays(config.kind);
  for (Parameter* p : params_) {
    if (p->value.device() != Device::kCpu) {
      throw std::invalid_argument("LocalOptimizer: parameter " + p->name +
                                  " is on the GPU; the local optimizer steps host tensors");
    }
    state_.emplace_back(arrays, std::vector<float>(static_cast<std::size_t>(p->value.numel()), 0));
  }
}

void LocalOptimizer::Step() {
  ++step_;
  for (std::size_t k = 0; k < params_.size(); ++k) {
    const float* grad = params_[k]->grad.data();
    std::vector<float*> state;
    for (auto& s : state_[k]) state.push_back(s.data());
    kernels::AggregateAndStep(std::span<const float* const>(&grad, 1), params_[k]->value.span(),
                              state, config_, step_);
  }
}

}  // namespace phub::worker
