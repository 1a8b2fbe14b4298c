// The CopyEngine of a GPU worker: copies on two streams of its own (device to host, host to
// device), created non-blocking so they run beside the compute stream and each other; events
// order them (a gradient's copy starts after the event its producer recorded; a consumer's
// stream waits for a weight copy's event), so no caller synchronises the device. Staging is
// page-locked (cudaHostAlloc): copies run at the bus's speed and asynchronously, and a NIC can
// register it once. Back-pressure: at most `max_in_flight` copies per direction not yet done.
//
// Built where CMake found the CUDA toolkit (PHUB_HAVE_CUDA_STAGING); this header includes no
// CUDA header. Fences hold CUDA events; CudaEventOf gives one to code that passes it on (NCCL).
#pragma once

#include <cstddef>
#include <memory>

#include "phub/staging/copy_engine.h"

namespace phub::staging {

struct CudaCopyEngineOptions {
  int device = 0;                   // CUDA device ordinal
  std::size_t max_in_flight = 256;  // per direction; >= 1
};

// FailedPrecondition without a usable GPU; InvalidArgument for bad options.
StatusOr<std::unique_ptr<CopyEngine>> MakeCudaCopyEngine(CudaCopyEngineOptions options);

// The cudaEvent_t of a fence a CUDA engine made (nullptr for a trivially passed fence).
void* CudaEventOf(const Fence& fence);

}  // namespace phub::staging
