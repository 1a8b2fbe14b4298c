#include "worker/train/trainer.h"

#include <chrono>
#include <functional>

#include "absl/strings/str_cat.h"

namespace phub::worker {
namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

}  // namespace

std::vector<keys::TensorSpec> TensorTable(Model& model) {
  std::vector<keys::TensorSpec> table;
  for (Parameter* p : model.parameters()) {
    table.push_back({p->name, static_cast<std::uint64_t>(p->value.numel())});
  }
  return table;
}

Trainer::Trainer(Model& model, Backend& backend)
    : model_(model), backend_(backend), params_(model.parameters()) {
  for (std::uint32_t t = 0; t < params_.size(); ++t) index_[params_[t]] = t;
}

Trainer::~Trainer() { (void)Close(); }

StatusOr<std::unique_ptr<Trainer>> Trainer::WithExchange(Model& model, Backend& backend,
                                                         const Connect& connect, bool overlap) {
  std::unique_ptr<Trainer> t(new Trainer(model, backend));
  t->overlap_ = overlap;
  std::vector<std::span<float>> grads, weights;
  for (Parameter* p : t->params_) {
    const auto n = static_cast<std::size_t>(p->value.numel());
    grads.emplace_back(p->grad.data(), n);  // on the backend's device
    weights.emplace_back(p->value.data(), n);
  }
  PHUB_ASSIGN_OR_RETURN(std::shared_ptr<staging::CopyEngine> engine, backend.MakeCopyEngine());
  PHUB_ASSIGN_OR_RETURN(t->exchange_, connect(TensorTable(model), std::move(engine),
                                              std::move(grads), std::move(weights)));
  t->mode_ = t->exchange_->name();
  return t;
}

StatusOr<std::unique_ptr<Trainer>> Trainer::Local(Model& model, Backend& backend,
                                                  const kernels::OptimizerConfig& optimizer) {
  std::unique_ptr<Trainer> t(new Trainer(model, backend));
  PHUB_ASSIGN_OR_RETURN(t->local_, LocalOptimizer::Create(t->params_, optimizer, backend));
  t->mode_ = "local";
  return t;
}

Status Trainer::Init() {
  if (!exchange_) return absl::OkStatus();
  return exchange_->Init(backend_.stream());
}

Status Trainer::WaitLayer(Layer& layer, double& blocked_ms) {
  const auto start = Clock::now();
  for (Parameter& p : layer.parameters()) {
    const std::uint32_t t = index_.at(&p);
    PHUB_RETURN_IF_ERROR(exchange_->Wait(t, backend_.stream()));
  }
  blocked_ms += MsSince(start);
  return absl::OkStatus();
}

Status Trainer::PushLayer(Layer& layer) {
  for (Parameter& p : layer.parameters()) {
    PHUB_RETURN_IF_ERROR(exchange_->Push(index_.at(&p), backend_.stream()));
  }
  return absl::OkStatus();
}

StatusOr<StepTimes> Trainer::Step(const Tensor& x, const Tensor& labels,
                                  const std::optional<kernels::StepValues>& values) {
  StepTimes times;
  const auto start = Clock::now();
  Model::LayerHook wait;
  if (exchange_ && overlap_) {
    wait = [&](Layer& layer) {
      return pending_ ? WaitLayer(layer, times.blocked_ms) : absl::OkStatus();
    };
  }
  PHUB_RETURN_IF_ERROR(model_.Forward(x, true, wait).status());
  PHUB_ASSIGN_OR_RETURN(times.loss, model_.Loss(labels));
  // The step's values before its first push (forward has waited for every tensor of the last
  // step, so none of its pushes is left to take them).
  if (values)
    PHUB_RETURN_IF_ERROR(exchange_ ? exchange_->BeginIteration(*values)
                                   : local_->SetValues(*values));
  if (!exchange_) {
    PHUB_RETURN_IF_ERROR(model_.Backward(labels));
    PHUB_RETURN_IF_ERROR(local_->Step());
  } else if (overlap_) {
    PHUB_RETURN_IF_ERROR(model_.Backward(labels, [&](Layer& layer) { return PushLayer(layer); }));
    pending_ = true;
  } else {
    std::vector<Layer*> order;  // backward order, as overlap would push
    PHUB_RETURN_IF_ERROR(model_.Backward(labels, [&](Layer& layer) {
      order.push_back(&layer);
      return absl::OkStatus();
    }));
    for (Layer* layer : order) PHUB_RETURN_IF_ERROR(PushLayer(*layer));
    for (Layer* layer : order) PHUB_RETURN_IF_ERROR(WaitLayer(*layer, times.blocked_ms));
  }
  PHUB_RETURN_IF_ERROR(backend_.Synchronize());
  times.total_ms = MsSince(start);
  return times;
}

Status Trainer::Finish() {
  if (!exchange_ || !pending_) return absl::OkStatus();
  PHUB_RETURN_IF_ERROR(exchange_->WaitAll(backend_.stream()));
  pending_ = false;
  return absl::OkStatus();
}

Status Trainer::Close() {
  if (!exchange_) return absl::OkStatus();
  return exchange_->Close();
}

}  // namespace phub::worker
