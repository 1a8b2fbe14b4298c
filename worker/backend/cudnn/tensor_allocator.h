// The device-tensor allocator (worker/tensor's DeviceAllocator hook) that the cuDNN backend
// installs: a caching one, CUDA's stream-ordered memory pool (cudaMallocAsync/cudaFreeAsync).
#pragma once

#include "phub/common/status.h"

namespace phub::worker::cudnn {

// Makes Tensor::Allocate(..., Device::kCuda) allocate on `device` for the whole process (the hook
// is per device kind, so one GPU per process). Freed memory stays in the device's pool for the
// next tensor instead of going back to the driver: a model's per-step scratch tensors cost no
// cudaMalloc (which is slow) and no cudaFree (which waits for the whole device).
//
// Allocations and frees are ordered on the legacy default stream, which every blocking stream
// (Context's) waits for and is waited for by: a tensor freed while kernels on a Context's stream
// still read it is reused only after they are done, and it stays valid after any Context is
// gone (tensors may outlive their backend). An allocation the GPU has no memory for is
// ResourceExhausted. Returns the failure of the CUDA calls that set the pool up.
Status InstallTensorAllocator(int device);

}  // namespace phub::worker::cudnn
