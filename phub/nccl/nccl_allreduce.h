// NCCL allreduce: the GPU twin of phub::ring::RingAllreduce, and the GPU ring a user would
// otherwise pick. Each rank is one process (or thread) driving one GPU; buffers live in that
// GPU's memory and NCCL sums them in place (its own ring/tree algorithms over NVLink, PCIe or
// the network). Ranks find each other like the ring's: rank 0 publishes the communicator's id
// under a shared directory (UniqueIdFile) and every rank joins the communicator with it.
//
// This header is free of CUDA and NCCL headers (they stay in the .cc), so users need neither
// to compile against it; they link phub_nccl, which brings libcudart and libnccl.
//
// Threading and CUDA state: one NcclAllreduce may be used by one thread at a time. Connect()
// and Allreduce() make the rank's device the calling thread's current CUDA device
// (cudaSetDevice), as a training loop on that GPU does anyway. The object owns one CUDA
// stream, created blocking: work the caller queued on the legacy default stream (gradient
// kernels, cudaMemcpy) finishes before an allreduce reads the buffer. Work on the caller's
// own non-blocking streams must be synchronized by the caller before the call.
//
// Failures never hang: initialisation and every call are bounded by `timeout_ms`. A call that
// fails or times out aborts the communicator (ncclCommAbort); that and every later call
// return the error, and the job must be restarted (NCCL communicators cannot be repaired).
#pragma once

#include <cstddef>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "phub/common/reduce_op.h"
#include "phub/common/status.h"
#include "phub/kernels/wire_format.h"

namespace phub::nccl {

struct NcclOptions {
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  // Where rank 0 hands out the NCCL id (phub/rendezvous/address.h): a directory all ranks
  // share, or tcp://HOST:PORT[/JOB] served by rank 0. May be empty if world is 1.
  std::string rendezvous;
  int device = -1;             // CUDA device ordinal; -1: rank % CudaDeviceCount()
  int timeout_ms = 30000;      // bounds Connect (rank 0's id, every rank joining) and each call
};

// phub/common/reduce_op.h; kMean is NCCL's ncclAvg: the division is fused into the reduction,
// as in our ring.
using phub::ReduceOp;

// The number of CUDA devices this process can use. 0 — not an error — when there is no NVIDIA
// driver or no GPU is visible (CUDA_VISIBLE_DEVICES), so that tests can skip. An error when a
// driver is there but unusable (e.g. older than the CUDA runtime). Never called at static
// initialisation by this library.
StatusOr<int> CudaDeviceCount();

// NCCL's version as "major.minor.patch" (of the library loaded at run time).
std::string NcclVersion();

class NcclAllreduce {
 public:
  // Validates `options` (InvalidArgument, before touching CUDA), picks the device, creates the
  // stream, exchanges the id and joins the communicator. Blocks until every rank has joined,
  // or timeout_ms. FailedPrecondition when there is no usable GPU.
  static StatusOr<std::unique_ptr<NcclAllreduce>> Connect(const NcclOptions& options);
  // Tears the communicator down (bounded by timeout_ms; aborted if a peer does not respond).
  ~NcclAllreduce();
  NcclAllreduce(const NcclAllreduce&) = delete;
  NcclAllreduce& operator=(const NcclAllreduce&) = delete;

  // In place: on return `device_data[0, count)` holds the element-wise sum (or mean) over all
  // ranks. Blocks until the GPU has finished. Every rank must call with the same count, in the
  // same order of calls.
  // REQUIRES: device_data points to `count` floats in the memory of device(); the caller does
  // not touch them until the call returns.
  Status Allreduce(float* device_data, std::size_t count, ReduceOp op = ReduceOp::kSum);
  // The same over `count` elements of `format` (bf16: ncclBfloat16, fp16: ncclHalf): what
  // `--wire bf16|fp16` sends. NCCL keeps its partial sums in that format between hops.
  Status Allreduce(void* device_data, std::size_t count, kernels::WireFormat format,
                   ReduceOp op = ReduceOp::kSum);

  // The device-resident form (phub/exchange/nccl_device_exchange.h): NCCL's stream first waits
  // for `after` (a cudaEvent_t recorded where the data is complete; nullptr: nothing to wait
  // for), and `then(stream)` enqueues the caller's own work on NCCL's stream (a cudaStream_t)
  // after the reduction, before the call waits: one bounded wait covers both.
  Status Allreduce(float* device_data, std::size_t count, ReduceOp op, void* after,
                   const std::function<Status(void* stream)>& then);
  // The same, returning once the work is enqueued (NCCL's own enqueue is bounded by
  // timeout_ms): the caller checks its completion with Poll on an event `then` recorded.
  Status Enqueue(float* device_data, std::size_t count, ReduceOp op, void* after,
                 const std::function<Status(void* stream)>& then);
  // One look at `event` (a cudaEvent_t recorded on NCCL's stream): true once its work is done,
  // false while it runs; NCCL's asynchronous error, a CUDA error, or DeadlineExceeded once
  // `deadline` has passed (each aborts the communicator, as a failed Allreduce does).
  StatusOr<bool> Poll(void* event, std::chrono::steady_clock::time_point deadline);

  int device() const;  // the CUDA device ordinal this rank runs on
  std::uint32_t rank() const;
  std::uint32_t world_size() const;

  class Impl;

 private:
  explicit NcclAllreduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace phub::nccl
