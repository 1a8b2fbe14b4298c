#include "worker/backend/cudnn/tensor_allocator.h"

#include <cstdint>
#include <limits>
#include <utility>

#include "worker/backend/cudnn/checks.h"
#include "worker/tensor/tensor.h"

namespace phub::worker::cudnn {
namespace {

// Out of memory is ResourceExhausted (checks.h), as the DeviceAllocator contract wants.
StatusOr<void*> PoolAllocate(std::size_t bytes) {
  void* p = nullptr;
  PHUB_RETURN_IF_CUDA_ERROR(cudaMallocAsync(&p, bytes, cudaStreamLegacy));
  return p;
}

void PoolFree(void* p) {
  // May run at exit after the runtime is gone: nothing to report to, and a deleter must not throw.
  (void)cudaFreeAsync(p, cudaStreamLegacy);
}

StatusOr<void*> UncachedAllocate(std::size_t bytes) {
  void* p = nullptr;
  PHUB_RETURN_IF_CUDA_ERROR(cudaMalloc(&p, bytes));
  return p;
}

}  // namespace

Status InstallTensorAllocator(int device) {
  int pools = 0;
  PHUB_RETURN_IF_CUDA_ERROR(
      cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  DeviceAllocator allocator;
  if (pools == 0) {
    // Some virtualised GPUs have no memory pools: plain, uncached allocations.
    allocator.allocate = UncachedAllocate;
    allocator.free = [](void* p) { (void)cudaFree(p); };
  } else {
    // By default the pool returns freed memory to the driver at every synchronisation; keep it.
    cudaMemPool_t pool = nullptr;
    PHUB_RETURN_IF_CUDA_ERROR(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    PHUB_RETURN_IF_CUDA_ERROR(
        cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    allocator.allocate = PoolAllocate;
    allocator.free = PoolFree;
  }
  return SetDeviceAllocator(Device::kCuda, std::move(allocator));
}

}  // namespace phub::worker::cudnn
