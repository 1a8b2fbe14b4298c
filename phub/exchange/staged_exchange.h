// StagedExchange: a GradientExchange over host memory (the PS on TCP or verbs, the TCP ring)
// serving tensors on a device, through a staging::CopyEngine (the pipeline BytePS and Horovod
// run on their GPU paths).
//
// Push(t): the engine copies grads[t] into tensor t's staging after the producer's fence, on the
// engine's own stream; a pusher thread hands each tensor to the exchange the moment its copy is
// done, in push order. A lander thread waits for each pushed tensor's answer in push order and
// starts its copy to the device as it lands, so copies overlap backward, the wire and the next
// forward; Wait(t) blocks until t's copy is enqueued and makes the consumer wait for it.
//
// Staging is allocated once per tensor (gradients and weights apart: a weight may land while
// the gradient is still being sent) and declared to the exchange, so verbs registers it once.
// When the engine's "device" is host memory (the CPU worker) the device buffers are the
// staging: nothing is copied, pushes are made inline, and the exchange runs as without it.
//
// Bounded: each tensor is in flight at most once (a second Push before its Wait is refused);
// the engine bounds its copies in flight; a copy that does not finish in `copy_timeout` fails
// the exchange. The first failure (the engine's, the exchange's) is returned by every later
// call.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "phub/exchange/device_exchange.h"
#include "phub/exchange/gradient_exchange.h"
#include "phub/keys/key_table.h"
#include "phub/staging/copy_engine.h"

namespace phub::exchange {

// Makes the host exchange over the staging's weight buffers (MakeExchange's signature).
using HostExchangeFactory = std::function<StatusOr<std::unique_ptr<GradientExchange>>(
    std::vector<keys::TensorSpec>, std::vector<std::span<float>>)>;

struct StagedExchangeOptions {
  std::chrono::milliseconds copy_timeout{60000};
};

class StagedExchange final : public DeviceExchange {
 public:
  // grads and weights: tensor t's device buffers, of its size. InvalidArgument for a size that
  // does not match; what `connect` or the engine return otherwise.
  static StatusOr<std::unique_ptr<StagedExchange>> Create(
      std::shared_ptr<staging::CopyEngine> engine, std::vector<keys::TensorSpec> tensors,
      std::vector<std::span<const float>> grads, std::vector<std::span<float>> weights,
      const HostExchangeFactory& connect, StagedExchangeOptions options = {});
  ~StagedExchange() override;

  Status Init(staging::Stream stream) override;
  Status Push(std::uint32_t tensor, staging::Stream producer) override;
  Status Wait(std::uint32_t tensor, staging::Stream consumer) override;
  Status WaitAll(staging::Stream consumer) override;
  Status Close() override;
  std::uint64_t start_iteration() const override { return inner_->start_iteration(); }
  std::string name() const override { return inner_->name(); }

 private:
  struct Tensor {
    std::span<const float> grads;                     // device
    std::span<float> weights;                         // device
    staging::StagingBuffer host_grads, host_weights;  // (empty when the device is the host)
    std::span<const float> sent;                      // what the exchange sends from
    std::span<float> landed;                          // where the exchange writes the weights
    bool in_flight = false;     // pushed, not yet waited for (caller's thread)
    std::uint64_t pushed = 0;   // guarded by mu_
    std::uint64_t arrived = 0;  // copies to the device enqueued; guarded by mu_
    staging::Fence on_device;   // the last of them; guarded by mu_
    staging::Fence to_host;     // the last copy to host (caller's thread)
  };
  StagedExchange() = default;
  bool staged() const { return !engine_->DeviceIsHost(); }
  void Fail(const Status& status);
  void PushLoop();
  void LandLoop();

  std::shared_ptr<staging::CopyEngine> engine_;
  StagedExchangeOptions options_;
  std::unique_ptr<GradientExchange> inner_;
  std::vector<Tensor> tensors_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::uint32_t, staging::Fence>> to_push_;  // copies to host queued
  std::deque<std::uint32_t> to_land_;                             // pushed, answer awaited
  Status error_;
  bool stopping_ = false;
  bool closed_ = false;
  std::thread pusher_, lander_;
};

}  // namespace phub::exchange
