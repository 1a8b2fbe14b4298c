// The exchange of the allreduce systems (ring, NCCL) behind the GradientExchange API: each
// pushed gradient is averaged over all workers by an Allreducer and the worker then applies the
// same fused optimizer kernel phubd runs (kernels::AggregateAndStep with one input), so a job
// switches between `ps`, `ring` and `nccl` with one flag and computes the same training.
//
// One exchange thread takes pushed tensors in push order (every worker must push in the same
// order: allreduce calls pair up by order), copies the gradient into a per-tensor buffer,
// allreduces it and steps the weights. Each worker keeps its own optimizer state (the PS keeps
// it once). Tensors are reduced one call each; fusing small tensors into buckets
// (Horovod-style) is not done yet, which costs latency on models with many small tensors.
//
// A schedule (BeginIteration) changes the values the worker steps with: each Push takes the
// values in force when it is made, so a push of the last iteration still queued steps with
// that iteration's values.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "phub/common/aligned_buffer.h"
#include "phub/exchange/allreducer.h"
#include "phub/exchange/gradient_exchange.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/keys/key_table.h"

namespace phub::exchange {

class AllreduceExchange final : public GradientExchange {
 public:
  // Takes a connected allreducer (ring_exchange.h, nccl_exchange.h make one). InvalidArgument
  // for a bad optimizer or buffers that do not match the tensor table.
  static StatusOr<std::unique_ptr<AllreduceExchange>> Create(
      const kernels::OptimizerConfig& optimizer, std::unique_ptr<Allreducer> allreducer,
      std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> weights);
  // What Create refuses, for connect functions to check before they connect (so a bad flag
  // never leaves the other ranks waiting on this one).
  static Status Check(const kernels::OptimizerConfig& optimizer,
                      const std::vector<keys::TensorSpec>& tensors,
                      const std::vector<std::span<float>>& weights);
  ~AllreduceExchange() override;

  // Broadcasts rank 0's weights (an allreduce-sum where every other rank contributes zeros, so
  // the result is rank 0's bytes exactly). Call before the first Push, from one thread.
  Status Init() override;
  // The values every later Push steps with (the kind stays the one Create was given).
  // InvalidArgument for values that kind refuses (kernels::ValidateStepValues), naming them;
  // FailedPrecondition after Close. Does not block.
  Status BeginIteration(const kernels::StepValues& values) override;
  Status Push(std::uint32_t tensor, std::span<const float> grads) override;
  Status Wait(std::uint32_t tensor) override;
  Status WaitAll() override;
  Status Close() override;
  std::string name() const override { return name_; }

 private:
  struct Tensor {
    std::span<float> weights;
    AlignedBuffer gradient;             // the pushed gradient, then its mean over workers
    std::vector<AlignedBuffer> state;   // optimizer state arrays
    std::uint64_t steps = 0;            // optimizer steps taken (Adam's t)
    std::uint64_t pushed = 0;           // guarded by mu_
    std::uint64_t done = 0;             // guarded by mu_
  };
  // A pushed tensor and the optimizer it steps with (its push's iteration's values).
  struct Pushed {
    std::uint32_t tensor;
    kernels::OptimizerConfig optimizer;
  };
  AllreduceExchange() = default;
  void Run();  // the exchange thread
  Status Step(Tensor& tensor, const kernels::OptimizerConfig& optimizer);

  kernels::OptimizerKind kind_{};       // fixed at Create
  kernels::OptimizerConfig optimizer_;  // guarded by mu_ (BeginIteration sets its values)
  std::unique_ptr<Allreducer> allreducer_;
  std::string name_;  // the allreducer's, kept after Close drops it
  std::vector<Tensor> tensors_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pushed> queue_;         // pushed, not yet reduced
  Status error_;                     // first failure; every later call returns it
  bool stopping_ = false;
  bool closed_ = false;
  std::thread thread_;
};

}  // namespace phub::exchange
