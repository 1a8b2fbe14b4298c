// GradientExchange: what a worker's training loop sees of distributed training, whichever
// system moves the bytes. The worker hands over each tensor's gradient the moment backward
// produces it and, before forward reads a tensor, waits for that tensor's fresh weights. The
// backends differ in who applies the optimizer, not in what the worker sees:
//
//   ps            one phubd (a dedicated PS box): the PS averages and applies the optimizer;
//                 fresh weights land in the worker's buffers (ps_exchange.h).
//   ps-colocated  one phubd on every worker host, the model spread over all of them
//                 (keys/server_placement.h); otherwise as `ps`.
//   ring          ring allreduce of the gradient (mean), then the same optimizer kernel as
//                 phubd's applied on the worker (ring_exchange.h, allreduce_exchange.h).
//   nccl          the same with NCCL's allreduce on the GPU (nccl_exchange.h).
//
// With the same optimizer and initial weights, every backend computes the same synchronous
// SGD (tests/integration/exchange_training_test.cc checks each against one float64 reference).
//
//   auto exchange = MakeExchange(options, tensors, weights);    // make_exchange.h
//   exchange->Init();                                 // every worker starts from rank 0's weights
//   a schedule, before the first Push of each iteration: exchange->BeginIteration(values);
//   per iteration, backward order:  exchange->Push(t, grads[t]);
//                 before forward:   exchange->Wait(t);
//   exchange->Close();
//
// Buffers: weights[t] must outlive the exchange and must not be touched between Push(t) and
// Wait(t); grads must stay valid and unmodified until Wait(t) returns. Every worker must push
// the same tensors in the same order each iteration (the ring relies on it; the PS does not
// care). Errors come back as a Status from the next call, never as an exception or a hang.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/exchange/elastic_membership.h"
#include "phub/kernels/optimizer_config.h"

namespace phub::exchange {

class GradientExchange {
 public:
  virtual ~GradientExchange() = default;

  // Optional: the buffers Push(t, ...) will always send tensor t's gradient from, fixed for the
  // exchange's life (one per tensor, its size). A transport that must register memory with
  // its NIC (verbs) registers them once and then sends them without a copy; others ignore it.
  virtual Status DeclareGradients(const std::vector<std::span<const float>>& grads) {
    return absl::OkStatus();
  }

  // Makes every worker's weights equal to rank 0's (or, with a PS that loaded a file, the
  // PS's). Blocks until they have landed.
  virtual Status Init() = 0;
  // A schedule (docs/design.md "Hyper-parameters per iteration"): the hyper-parameters of the
  // iteration whose first Push comes next. Whoever steps the weights (phubd, or this worker
  // after the allreduce) steps that iteration with them. Call it before the iteration's first
  // Push, with the same values on every worker; an exchange that steps with fixed values never
  // needs it. The PS needs the exchange made for it (PsExchangeOptions::client.
  // per_iteration_values), else FailedPrecondition. InvalidArgument for values the job's
  // optimizer refuses (kernels::ValidateStepValues); the exchange stays usable after either.
  virtual Status BeginIteration(const kernels::StepValues& values) = 0;
  // Starts exchanging tensor t's gradient. Does not block (beyond queueing).
  virtual Status Push(std::uint32_t tensor, std::span<const float> grads) = 0;
  // Blocks until weights[t] holds the weights that answer the last Push(t) (or Init).
  virtual Status Wait(std::uint32_t tensor) = 0;
  virtual Status WaitAll() = 0;
  // Leaves the job cleanly. Idempotent.
  virtual Status Close() = 0;

  // The iteration Init's weights are of: 0, except where the PS resumed this worker (it
  // rejoined a running job, or phubd resumed a checkpoint): the caller's next step is then
  // start_iteration() + 1 (0-based step start_iteration()), with that step's data.
  virtual std::uint64_t start_iteration() const { return 0; }
  // An elastic job's membership (elastic_membership.h), or null: a job of fixed size.
  virtual ElasticMembership* elastic() { return nullptr; }

  // "ps", "ps-colocated", "ring" or "nccl": for logs and result files.
  virtual std::string name() const = 0;
};

}  // namespace phub::exchange
