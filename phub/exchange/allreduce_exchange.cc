#include "phub/exchange/allreduce_exchange.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::exchange {

Status AllreduceExchange::Check(const kernels::OptimizerConfig& optimizer,
                                const std::vector<keys::TensorSpec>& tensors,
                                const std::vector<std::span<float>>& weights) {
  PHUB_RETURN_IF_ERROR(kernels::Validate(optimizer));
  if (weights.size() != tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("AllreduceExchange: ", weights.size(),
                                                   " weight buffers for ", tensors.size(),
                                                   " tensors: give one buffer per tensor"));
  }
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    if (weights[t].size() != tensors[t].elements) {
      return absl::InvalidArgumentError(absl::StrCat(
          "AllreduceExchange: the weight buffer of tensor ", t, " ('", tensors[t].name, "') holds ",
          weights[t].size(), " floats; the tensor table says ", tensors[t].elements));
    }
  }
  return absl::OkStatus();
}

StatusOr<std::unique_ptr<AllreduceExchange>> AllreduceExchange::Create(
    const kernels::OptimizerConfig& optimizer, std::unique_ptr<Allreducer> allreducer,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> weights) {
  PHUB_RETURN_IF_ERROR(Check(optimizer, tensors, weights));
  std::unique_ptr<AllreduceExchange> exchange(new AllreduceExchange());
  exchange->kind_ = optimizer.kind;
  exchange->optimizer_ = optimizer;
  exchange->tensors_ = std::vector<Tensor>(tensors.size());
  const int state_arrays = kernels::StateArrays(optimizer.kind);
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    Tensor& tensor = exchange->tensors_[t];
    tensor.weights = weights[t];
    tensor.gradient = AlignedBuffer(weights[t].size());
    for (int s = 0; s < state_arrays; ++s) tensor.state.emplace_back(weights[t].size());
  }
  exchange->name_ = allreducer->name();
  exchange->allreducer_ = std::move(allreducer);
  exchange->thread_ = std::thread([raw = exchange.get()] { raw->Run(); });
  return exchange;
}

AllreduceExchange::~AllreduceExchange() { (void)Close(); }

Status AllreduceExchange::Init() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return absl::FailedPreconditionError("Init after Close");
  }
  for (Tensor& tensor : tensors_) {
    if (allreducer_->rank() != 0) std::fill(tensor.weights.begin(), tensor.weights.end(), 0.0f);
    if (tensor.weights.empty()) continue;
    if (Status s = allreducer_->Allreduce(tensor.weights, ReduceOp::kSum); !s.ok()) {
      std::lock_guard lock(mu_);
      if (error_.ok()) error_ = s;
      return s;
    }
  }
  return absl::OkStatus();
}

Status AllreduceExchange::BeginIteration(const kernels::StepValues& values) {
  if (Status valid = kernels::ValidateStepValues(kind_, values); !valid.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " exchange: BeginIteration: ", valid.message()));
  }
  std::lock_guard lock(mu_);
  if (!error_.ok()) return error_;
  if (closed_) return absl::FailedPreconditionError("BeginIteration after Close");
  optimizer_ = kernels::WithValues(optimizer_, values);
  return absl::OkStatus();
}

Status AllreduceExchange::Push(std::uint32_t t, std::span<const float> grads) {
  if (t >= tensors_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Push: tensor ", t, " does not exist (", tensors_.size(), " tensors)"));
  }
  Tensor& tensor = tensors_[t];
  if (grads.size() != tensor.weights.size()) {
    return absl::InvalidArgumentError(absl::StrCat("Push: tensor ", t, "'s gradient has ",
                                                   grads.size(), " floats; the tensor has ",
                                                   tensor.weights.size()));
  }
  std::lock_guard lock(mu_);
  if (!error_.ok()) return error_;
  if (closed_) return absl::FailedPreconditionError("Push after Close");
  if (tensor.pushed != tensor.done) {
    return absl::FailedPreconditionError(
        absl::StrCat("Push: tensor ", t, " is still in flight: Wait(", t, ") first"));
  }
  // Copied on the caller's thread: the gradient buffer is the caller's again at once.
  std::memcpy(tensor.gradient.data(), grads.data(), grads.size_bytes());
  ++tensor.pushed;
  queue_.push_back({t, optimizer_});
  cv_.notify_all();
  return absl::OkStatus();
}

Status AllreduceExchange::Wait(std::uint32_t t) {
  if (t >= tensors_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("Wait: tensor ", t, " does not exist (", tensors_.size(), " tensors)"));
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !error_.ok() || tensors_[t].done == tensors_[t].pushed; });
  return error_;
}

Status AllreduceExchange::WaitAll() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    return !error_.ok() || std::all_of(tensors_.begin(), tensors_.end(),
                                       [](const Tensor& t) { return t.done == t.pushed; });
  });
  return error_;
}

Status AllreduceExchange::Close() {
  {
    std::lock_guard lock(mu_);
    if (closed_) return error_;
    closed_ = true;
    stopping_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
  allreducer_.reset();
  std::lock_guard lock(mu_);
  return error_;
}

void AllreduceExchange::Run() {
  for (;;) {
    Pushed next;
    {
      std::unique_lock lock(mu_);
      // Drain what was pushed before Close, unless the allreduce has failed.
      cv_.wait(lock, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty() || !error_.ok()) return;
      next = queue_.front();
      queue_.pop_front();
    }
    const std::uint32_t t = next.tensor;
    Status s = Step(tensors_[t], next.optimizer);
    std::lock_guard lock(mu_);
    if (!s.ok()) {
      spdlog::error("{} exchange of tensor {} failed: {}", name_, t, s.message());
      if (error_.ok()) error_ = s;
    } else {
      ++tensors_[t].done;
    }
    cv_.notify_all();
  }
}

Status AllreduceExchange::Step(Tensor& tensor, const kernels::OptimizerConfig& optimizer) {
  if (tensor.weights.empty()) return absl::OkStatus();
  PHUB_RETURN_IF_ERROR(allreducer_->Allreduce(tensor.gradient.span(), ReduceOp::kMean));
  const float* inputs[] = {tensor.gradient.data()};
  std::vector<float*> state;
  for (AlignedBuffer& s : tensor.state) state.push_back(s.data());
  kernels::AggregateAndStep(inputs, tensor.weights, state, optimizer, ++tensor.steps);
  return absl::OkStatus();
}

}  // namespace phub::exchange
