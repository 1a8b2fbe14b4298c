// The CopyEngine of a GPU worker: copies on two streams of its own (device to host, host to
// device), created non-blocking so they run beside the compute stream and each other; events
// order them (a gradient's copy starts after the event its producer recorded; a consumer's
// stream waits for a weight copy's event), so no caller synchronises the device. Staging is
// page-locked (cudaHostAlloc): copies run at the bus's speed and asynchronously, and a NIC can
// register it once. Back-pressure: at most `max_in_flight` copies per direction not yet done.
//
// Back-pressure is bounded too: a copy that finds its direction's ring full waits at most
// `backpressure_timeout` for the oldest copy to finish, then fails (DeadlineExceeded).
//
// Built where CMake found the CUDA toolkit (PHUB_HAVE_CUDA_STAGING); this header includes no
// CUDA header. Fences hold CUDA events; CudaEventOf gives one to code that passes it on (NCCL).
// Every call runs on the engine's device and leaves the caller's thread on its own (DeviceScope).
//
// GPUDirect RDMA: ExportDmaBuf exports the whole cudaMalloc allocation holding a range
// (cuMemGetHandleForAddressRange, mapped through PCIe BAR1 where the driver offers the choice)
// and the range's offset in it; Unimplemented, naming the driver's error, where the GPU or driver
// cannot. FlushRemoteWrites flushes only where the device's RDMA write ordering needs it (asked
// once, at creation).
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "phub/staging/copy_engine.h"

namespace phub::staging {

struct CudaCopyEngineOptions {
  int device = 0;                   // CUDA device ordinal
  std::size_t max_in_flight = 256;  // per direction; >= 1
  // How long a copy waits for room when its direction has max_in_flight copies not done (a
  // wedged GPU); > 0.
  std::chrono::milliseconds backpressure_timeout{60000};
};

// FailedPrecondition without a usable GPU; InvalidArgument for bad options.
StatusOr<std::unique_ptr<CopyEngine>> MakeCudaCopyEngine(CudaCopyEngineOptions options);

// The cudaEvent_t of a fence a CUDA engine made (nullptr for a trivially passed fence).
void* CudaEventOf(const Fence& fence);

// Makes `device` the calling thread's current CUDA device for the guard's life, then gives the
// caller its own back: a library call (the engine's, the NCCL exchange's) must not move a
// training loop's thread to another GPU. The caller's device is restored only where it had a
// context (the thread's current one, or the device's primary context active): setting a device
// nobody used would create a context there (hundreds of MB of GPU memory) for nothing. Asks
// the driver through the runtime (cudaGetDriverEntryPointByVersion): no link to libcuda.
//
//   DeviceScope scope(device);
//   PHUB_RETURN_IF_ERROR(scope.status());
class DeviceScope {
 public:
  explicit DeviceScope(int device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  // Whether `device` could be made current (Internal naming the device if not).
  const Status& status() const { return status_; }

 private:
  int restore_ = -1;  // the caller's device, to make current again; -1: leave it
  Status status_;
};

}  // namespace phub::staging
