// `--comm nccl` on device memory: NCCL averages each gradient in place in the GPU's memory and
// the optimizer steps the weights there (phub/kernels/cuda, the equations phubd runs), all on
// NCCL's stream, ordered by events: no host hop at all. Push(t) records an event on the
// producer's stream; an exchange thread takes tensors in push order (every rank pushes in the
// same order: NCCL pairs calls by order) and enqueues on NCCL's stream a wait for that event,
// the allreduce and the step. Wait(t) returns once t's work is enqueued and makes the
// consumer's stream wait for it on the device: neither side waits for the GPU. Between
// enqueues the thread watches the enqueued work finish within the communicator's timeout; past
// it, NCCL is aborted (which releases a stream a dead peer would hold) and every call fails.
// Each step is watched through an event of its own, so a tensor pushed again while its last
// step is still watched does not move that step's deadline onto the new one.
// A schedule (BeginIteration) changes the values the step uses from the next Push on: each
// push carries the values in force when it was made to the exchange thread.
//
// Close enqueues what was pushed before it, joins the exchange thread and finalizes NCCL; it
// returns the first error the exchange saw. Push and Init after Close are refused
// (FailedPrecondition). Calls run on the exchange's GPU and leave the caller's thread on its
// own device (staging::DeviceScope).
//
// The mean is left in grads[t] (the reduction is in place). fp32 only: `--wire bf16|fp16`
// takes the host path (nccl_exchange.h). Built where CMake found NCCL and nvcc.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "phub/common/membership.h"
#include "phub/exchange/device_exchange.h"
#include "phub/exchange/nccl_exchange.h"
#include "phub/keys/key_table.h"

namespace phub::exchange {

// Joins the NCCL communicator (blocks until every rank has). grads and weights: each tensor's
// device buffers on options.device's GPU. InvalidArgument for a bad optimizer, a compact
// wire or buffers that do not match; FailedPrecondition without a usable GPU.
StatusOr<std::unique_ptr<DeviceExchange>> ConnectNcclDeviceExchange(
    const NcclExchangeOptions& options, Membership membership,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> grads,
    std::vector<std::span<float>> weights);

}  // namespace phub::exchange
