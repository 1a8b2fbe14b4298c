// DeviceExchange: GradientExchange for tensors that live on the worker's device (a GPU; on a
// CPU worker, host memory). The training loop hands over each tensor's gradient with the stream
// whose work produced it, and before reading a tensor makes its own stream wait for the fresh
// weights; it never synchronises the device for the exchange.
//
//   staged_exchange.h       any GradientExchange (ps, ps-colocated, ring) behind a copy engine:
//                           pinned staging, a copy per tensor as backward produces it, pushed the
//                           moment its copy is done; weights copied to the device as they land.
//   nccl_device_exchange.h  NCCL's allreduce in place on the device gradient and the optimizer
//                           step on the device: no host hop at all.
//
//   exchange->Init(stream);                     // the device weights become rank 0's
//   per iteration, backward order:  exchange->Push(t, stream);   // grads[t] written on stream
//                 before forward:   exchange->Wait(t, stream);   // stream's later work sees
//                                                                // weights[t]'s fresh values
//
// Buffers (device memory, given when the exchange is made): grads[t] must not be written from
// Push(t) until Wait(t) returns; weights[t] must not be read or written between Push(t) and
// Wait(t). Errors come back as a Status from the next call, never as a hang.
#pragma once

#include <cstdint>
#include <string>

#include "phub/common/status.h"
#include "phub/exchange/elastic_membership.h"
#include "phub/kernels/optimizer_config.h"
#include "phub/staging/copy_engine.h"

namespace phub::exchange {

class DeviceExchange {
 public:
  virtual ~DeviceExchange() = default;

  // Makes every worker's device weights rank 0's (or the PS's); `stream` is the one the
  // weights were written on and will be read on. Returns once they are on the device.
  virtual Status Init(staging::Stream stream) = 0;
  // As GradientExchange::BeginIteration: the values the next iteration steps with.
  virtual Status BeginIteration(const kernels::StepValues& values) = 0;
  // Starts exchanging tensor t: its gradient is what `producer`'s work enqueued so far writes.
  // Does not wait for the device.
  virtual Status Push(std::uint32_t tensor, staging::Stream producer) = 0;
  // Blocks (on the network, not the device) until weights[t]'s answer to the last Push(t) is on
  // its way, and makes `consumer` wait for it on the device.
  virtual Status Wait(std::uint32_t tensor, staging::Stream consumer) = 0;
  virtual Status WaitAll(staging::Stream consumer) = 0;
  // Leaves the job cleanly. Idempotent.
  virtual Status Close() = 0;
  // As GradientExchange::start_iteration.
  virtual std::uint64_t start_iteration() const { return 0; }
  // As GradientExchange::elastic.
  virtual ElasticMembership* elastic() { return nullptr; }
  // The system's name ("ps", "ring", "nccl"), for logs and result files.
  virtual std::string name() const = 0;
};

}  // namespace phub::exchange
