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
// Segments: a tensor longer than `segment_bytes` travels as segments of that size (the last
// shorter), each copied, pushed and landed on its own: a large tensor's push starts once its
// first segment is on the host, and its first weights go to the device while the rest are still
// on the wire (BytePS partitions its tensors the same way). The exchange below sees each
// segment as a tensor of its own, named "<name>#<k>"; a tensor of one segment keeps its name.
// The split depends on the tensors and `segment_bytes` only, never on the engine, so a GPU
// worker and a CPU worker of one job present the same tensors to phubd.
//
// Staging is allocated once per tensor (gradients and weights apart: a weight may land while
// the gradient is still being sent) and declared to the exchange, so verbs registers it once.
// When the engine's "device" is host memory (the CPU worker) the device buffers are the
// staging: nothing is copied, pushes are made inline, and the exchange runs as without it.
//
// Direct (GPUDirect RDMA, StagedExchangeOptions::direct): the exchange below was made over the
// device buffers themselves, which its transport registered for the NIC (make_exchange.cc
// decides when). Nothing is staged or copied: the pusher pushes each gradient from the device
// once the producer's fence has passed, and the lander makes the NIC's writes of the weights
// visible to the device (CopyEngine::FlushRemoteWrites) before Wait lets the consumer go on.
//
// A schedule (BeginIteration) goes to the exchange below in push order: once every push made
// before it has been handed down (the pusher may still hold the last iteration's), so none of
// that iteration's steps with the next one's values.
//
// Bounded: each tensor is in flight at most once (a second Push before its Wait is refused);
// the engine bounds its copies in flight; a copy that does not finish in `copy_timeout` fails
// the exchange. The first failure (a copy the engine refuses or does not finish, the
// exchange's) is recorded and returned by every later Push and Wait.
//
// Thread-safety: Push, Wait, WaitAll, InFlight and Close may be called from any thread (a
// hook's thread pushes while a waiter thread waits, as phub.torch does); one tensor's Push and
// its Wait must still come in that order. Close closes the exchange below first, so a lander
// blocked in its Wait returns, then joins the threads: it is bounded by the exchange's close
// and `copy_timeout`, never by a peer that stays silent.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
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

// StagedExchangeOptions::segment_bytes's default (below: why this size).
inline constexpr std::uint64_t kDefaultSegmentBytes = 4 << 20;

struct StagedExchangeOptions {
  std::chrono::milliseconds copy_timeout{60000};
  // The factory's exchange sends from and lands into the device buffers (GPUDirect RDMA): no
  // staging. REQUIRES: the engine is a GPU's (not DeviceIsHost).
  bool direct = false;
  // Tensors longer than this go through in segments of it (above); 0: each tensor whole.
  // REQUIRES: a multiple of 4 (whole floats). 4 MiB: four of phubd's default 1 MiB chunks, so
  // phubd cuts the segments into the chunks it would cut the tensor into; the pipeline's cost
  // per segment (an event, a hand-off, a push) stays a few percent of its copy.
  std::uint64_t segment_bytes = kDefaultSegmentBytes;
};

// The exchange below's tensors for `tensors` cut at `segment_bytes` (StagedExchange's
// segments, in order; names as above). InvalidArgument for segment_bytes not a multiple of 4, or
// more segments than a tensor index holds.
StatusOr<std::vector<keys::TensorSpec>> SegmentTensors(const std::vector<keys::TensorSpec>& tensors,
                                                       std::uint64_t segment_bytes);

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
  // Waits (bounded by copy_timeout, like the pushes it waits for) until every earlier Push has
  // reached the exchange below, then forwards to it. Its refusal of the values
  // (InvalidArgument, FailedPrecondition: the caller's to fix) is returned and leaves the
  // exchange usable; any other failure fails it.
  Status BeginIteration(const kernels::StepValues& values) override;
  Status Push(std::uint32_t tensor, staging::Stream producer) override;
  Status Wait(std::uint32_t tensor, staging::Stream consumer) override;
  Status WaitAll(staging::Stream consumer) override;
  Status Close() override;
  std::uint64_t start_iteration() const override { return inner_->start_iteration(); }
  ElasticMembership* elastic() override { return inner_->elastic(); }
  std::string name() const override { return inner_->name(); }

  // The number of tensors pushed and not yet waited for.
  std::size_t InFlight();

  // One tensor of the exchange below: elements [offset, offset + elements) of a caller tensor.
  struct Segment {
    std::uint32_t tensor = 0;
    std::uint64_t offset = 0, elements = 0;
  };
  // The exchange below's tensors, in its order (a caller tensor's consecutive, in order).
  const std::vector<Segment>& segments() const { return segments_; }

 private:
  struct Tensor {
    std::string name;                                 // for errors
    std::span<const float> grads;                     // device
    std::span<float> weights;                         // device
    staging::StagingBuffer host_grads, host_weights;  // (empty when the device is the host)
    std::span<const float> sent;                      // what the exchange sends from
    std::span<float> landed;                          // where the exchange writes the weights
    std::uint32_t first_segment = 0, segments = 1;    // its segments in segments_

    // Guarded by mu_. In flight while waited < pushed (Push counts before its copy starts, so
    // a second Push of the tensor is refused even while the first is copying).
    std::uint64_t pushed = 0;           // Pushes accepted
    std::uint64_t arrived = 0;          // answers whose copy to the device is enqueued
    std::uint64_t waited = 0;           // the pushes a Wait has returned for
    std::uint32_t landed_segments = 0;  // of the last Push: copies to the device enqueued
    // The last copy each way (a direction's copies finish in enqueue order, so the last one
    // passing means every segment's has).
    staging::Fence on_device;  // the last copy to the device (direct: none)
    staging::Fence to_host;    // the last copy to host (direct: the producer's fence)
  };
  StagedExchange() = default;
  // Copies through host staging (a GPU, not direct).
  bool staged() const { return !engine_->DeviceIsHost() && !options_.direct; }
  // Pushes and lands on the pusher and lander threads (staged, or direct: a device's fences).
  bool threaded() const { return !engine_->DeviceIsHost(); }
  // Records the first failure (none once Close has begun: the threads' errors are then its
  // own doing) and wakes every waiter.
  void Fail(const Status& status);
  // The error every call returns from now on (the first failure, or after Close); OK if none.
  // REQUIRES: mu_ held.
  Status RefusalLocked(const char* call) const;
  // Staged: the gradient's copy to host, then the pusher's turn; direct: the producer's fence,
  // then the pusher's turn.
  Status PushThreaded(std::uint32_t tensor, staging::Stream producer);
  void PushLoop();
  void LandLoop();

  std::shared_ptr<staging::CopyEngine> engine_;
  StagedExchangeOptions options_;
  std::unique_ptr<GradientExchange> inner_;
  std::vector<Tensor> tensors_;
  std::vector<Segment> segments_;  // the exchange below's tensors
  // For errors: "tensor 3", or "tensor 3 (segment 1 of 4)".
  std::string Where(std::uint32_t segment) const;
  // Segment k's part of its tensor's staging (or device buffers: not staged).
  std::span<const float> SentOf(const Segment& k) const {
    return tensors_[k.tensor].sent.subspan(k.offset, k.elements);
  }
  std::span<float> LandedOf(const Segment& k) const {
    return tensors_[k.tensor].landed.subspan(k.offset, k.elements);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  // Segments (indices into segments_):
  std::deque<std::pair<std::uint32_t, staging::Fence>> to_push_;  // copies to host queued
  std::deque<std::uint32_t> to_land_;                             // pushed, answer awaited
  // Segments queued for the pusher, and those it has handed to the exchange below (or given
  // up on): BeginIteration waits until they are equal.
  std::uint64_t queued_ = 0, handed_ = 0;
  Status error_;                                                  // the first failure
  bool stopping_ = false;
  bool closed_ = false;
  std::thread pusher_, lander_;
};

}  // namespace phub::exchange
