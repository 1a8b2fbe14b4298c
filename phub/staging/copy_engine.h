// CopyEngine: the seam between a worker's device memory and the host memory a transport sends
// from. A GPU worker's gradients are born on the device and its weights are read there; the PS
// and the TCP ring move host memory. The staging pipeline (phub/exchange/staged_exchange.h)
// moves each tensor across through an engine:
//
//   cuda_copy_engine.h  CUDA streams: copies on their own streams (one per direction), ordered
//                       by events, into pinned host memory, so they overlap compute and the wire.
//   host_copy_engine.h  memcpy on a copy thread per direction: the CPU worker's engine (its
//                       "device" is host memory, so a copy between one buffer and itself moves
//                       nothing), and the engine the pipeline's ordering, back-pressure and error
//                       paths are tested through on machines without a GPU.
//
// Fences order the work without blocking the caller: Record(stream) marks what a producer has
// enqueued so far; a copy starts after the fence it is given; StreamWait makes a consumer's
// stream wait for a fence on the device; only HostWait blocks a thread, with a deadline.
// Copies of one direction finish in the order they were enqueued (each engine runs a direction
// on one stream or thread), so a direction's last fence passing means every earlier one has.
//
// REQUIRES: one engine per device; its methods may be called from several threads.
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstddef>
#include <memory>
#include <span>
#include <string>

#include "absl/strings/str_cat.h"
#include "phub/common/status.h"

namespace phub::staging {

// A producer's or consumer's stream: cudaStream_t for the CUDA engine; the host engine has
// none (nullptr: the calling thread, which has done its work when it calls).
using Stream = void*;

// A point in an engine's work. Default-constructed: a point already passed. Cheap to copy; the
// engine that made it is the only one that understands it.
class Fence {
 public:
  Fence() = default;
  explicit Fence(std::shared_ptr<void> state) : state_(std::move(state)) {}
  bool trivially_passed() const { return state_ == nullptr; }
  void* state() const { return state_.get(); }

 private:
  std::shared_ptr<void> state_;
};

// A dma-buf exported for device memory (CopyEngine::ExportDmaBuf): `fd` (closed when the last
// copy of this goes) maps the device allocation holding the range; the range's first byte is
// at `offset` in it.
class DmaBuf {
 public:
  DmaBuf() = default;
  DmaBuf(int fd, std::uint64_t offset)
      : fd_(new int(fd),
            [](int* owned) {
              if (*owned >= 0) ::close(*owned);
              delete owned;
            }),
        offset_(offset) {}
  int fd() const { return fd_ ? *fd_ : -1; }
  std::uint64_t offset() const { return offset_; }

 private:
  std::shared_ptr<int> fd_;  // closes the descriptor with its last copy
  std::uint64_t offset_ = 0;
};

// Host memory the host side of copies lives in, fixed for its life (a NIC may register it).
class StagingBuffer {
 public:
  StagingBuffer() = default;
  StagingBuffer(std::span<float> span, std::shared_ptr<void> owner)
      : span_(span), owner_(std::move(owner)) {}
  std::span<float> span() const { return span_; }

 private:
  std::span<float> span_;
  std::shared_ptr<void> owner_;  // frees the memory when the last copy of the buffer goes
};

class CopyEngine {
 public:
  virtual ~CopyEngine() = default;

  // "cuda streams (device 0, pinned staging)", "host memcpy": for logs.
  virtual std::string Describe() const = 0;
  // True when "device" memory is this process's own host memory (the CPU worker): a transport
  // can then send straight from the device buffers, and staging them would only copy.
  virtual bool DeviceIsHost() const = 0;

  // `floats` of host memory, zeroed: page-locked on a GPU (copies at full bus speed, and a NIC
  // registers it once). ResourceExhausted when it cannot be had.
  virtual StatusOr<StagingBuffer> AllocateStaging(std::size_t floats) = 0;

  // The point `producer` has reached: everything enqueued on it so far.
  virtual StatusOr<Fence> Record(Stream producer) = 0;
  // Enqueues host[0, n) = device[0, n) to start once `after` has passed; returns the copy's
  // fence. Blocks (back-pressure) while the engine has its limit of copies in flight.
  virtual StatusOr<Fence> ToHost(const float* device, float* host, std::size_t n,
                                 const Fence& after) = 0;
  // The same the other way.
  virtual StatusOr<Fence> ToDevice(const float* host, float* device, std::size_t n,
                                   const Fence& after) = 0;
  // Blocks until `fence` has passed (ok), its copy failed (that error), or `timeout` passed
  // (DeadlineExceeded saying what was waited for).
  virtual Status HostWait(const Fence& fence, std::chrono::milliseconds timeout) = 0;
  // Makes `consumer` wait on the device for `fence`; returns at once.
  virtual Status StreamWait(Stream consumer, const Fence& fence) = 0;

  // GPUDirect RDMA (docs/design.md "GPUDirect"): the device memory [device, device + bytes)
  // exported as a dma-buf a NIC can register. Unimplemented, saying why, where the device or
  // driver cannot (the host engine: its "device" is host memory; a GPU or driver without
  // dma-buf support; memory not from the device allocator).
  virtual StatusOr<DmaBuf> ExportDmaBuf(const void* device, std::size_t bytes) {
    return absl::UnimplementedError(
        absl::StrCat(Describe(), ": no device memory to export for a NIC"));
  }
  // After a NIC wrote device memory (RDMA), makes the writes visible to work later enqueued on
  // the device (cudaDeviceFlushGPUDirectRDMAWrites where the device needs it); nothing where
  // it does not.
  virtual Status FlushRemoteWrites() { return absl::OkStatus(); }
};

}  // namespace phub::staging
