// Trainer: one worker's training step with its gradients going through a GradientExchange (the
// PS or the ring) or, alone, through the LocalOptimizer.
//
// Overlap (the default), the PS design's main lesson: Model::Backward calls back the moment a
// layer's gradients are final (last layer first) and each of that layer's tensors is pushed
// right there, while backward goes on below it; the next Forward waits, layer by layer, only
// for the weights it is about to read, so the first layers compute while the last ones' fresh
// weights are still on the wire. Without overlap (--no-overlap, for the benchmark): push
// everything after the whole backward and wait for all of it before returning.
//
// Buffers: the exchange works on the parameters where they live (phub/exchange/
// device_exchange.h), ordered against the backend's stream; the Trainer never synchronises the
// device for it. On the CPU the PS's answer lands in the weights the next forward reads (zero
// copy); on a GPU the backend's copy engine stages each tensor through pinned memory as
// backward produces it, or NCCL reduces it in place and the optimizer steps it on the device.
//
// A schedule (worker/train/lr_schedule.h): Step's `values` are the step's hyper-parameters,
// handed to the exchange (BeginIteration) after forward and before backward's first push, or
// to the local optimizer; without them the step uses the last values given, or the fixed ones.
//
// Errors: every call returns the first failure of the model, the backend or the exchange as a
// Status; a failed Step leaves the model and the exchange in an unspecified state (close it).
// REQUIRES: one thread at a time.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "phub/common/status.h"
#include "phub/exchange/device_exchange.h"
#include "phub/keys/key_table.h"
#include "phub/staging/copy_engine.h"
#include "worker/nn/model.h"
#include "worker/train/local_optimizer.h"

namespace phub::worker {

// The tensor table the exchange is built from: one entry per parameter, in the model's stable
// order, named as the parameter ("conv1.weight").
std::vector<keys::TensorSpec> TensorTable(Model& model);

struct StepTimes {
  double loss = 0;
  double total_ms = 0;    // the whole step: forward, loss, backward, exchange
  double blocked_ms = 0;  // inside the exchange's Wait/WaitAll: the communication share's top
};

class Trainer {
 public:
  // Makes the exchange: the tensor table (TensorTable), the backend's copy engine, and each
  // parameter's gradient and weight buffers on the backend's device (make_exchange.h's
  // MakeDeviceExchange has this shape).
  using Connect = std::function<StatusOr<std::unique_ptr<exchange::DeviceExchange>>(
      std::vector<keys::TensorSpec>, std::shared_ptr<staging::CopyEngine>,
      std::vector<std::span<float>> grads, std::vector<std::span<float>> weights)>;
  // Distributed: call Init first.
  static StatusOr<std::unique_ptr<Trainer>> WithExchange(Model& model, Backend& backend,
                                                         const Connect& connect, bool overlap);
  // Alone: the optimizer runs here (InvalidArgument for a bad optimizer config).
  static StatusOr<std::unique_ptr<Trainer>> Local(Model& model, Backend& backend,
                                                  const kernels::OptimizerConfig& optimizer);
  ~Trainer();

  // Every worker starts from the same weights (rank 0's, or the PS's).
  Status Init();
  // One synchronous SGD step on a batch (x on the backend's device, labels on the host), with
  // `values` when a schedule changes them (the same on every worker).
  StatusOr<StepTimes> Step(const Tensor& x, const Tensor& labels,
                           const std::optional<kernels::StepValues>& values = std::nullopt);
  // Waits for the last step's weights (before evaluating or saving them).
  Status Finish();
  Status Close();

  const std::string& mode() const { return mode_; }
  // The iteration Init's weights are of: 0, or where the PS resumed this worker (a rejoin, a
  // phubd resumed from a checkpoint). The next Step is 0-based step start_iteration().
  std::uint64_t start_iteration() const { return exchange_ ? exchange_->start_iteration() : 0; }
  // An elastic job's membership (exchange/elastic_membership.h), or null.
  exchange::ElasticMembership* elastic() { return exchange_ ? exchange_->elastic() : nullptr; }

 private:
  Trainer(Model& model, Backend& backend);
  Status WaitLayer(Layer& layer, double& blocked_ms);
  Status PushLayer(Layer& layer);

  Model& model_;
  Backend& backend_;
  std::string mode_;
  bool overlap_ = true;
  std::unique_ptr<exchange::DeviceExchange> exchange_;
  std::unique_ptr<LocalOptimizer> local_;
  std::vector<Parameter*> params_;
  std::unordered_map<const Parameter*, std::uint32_t> index_;  // parameter -> tensor
  bool pending_ = false;                                       // pushes not yet waited for
};

}  // namespace phub::worker
