#include "worker/backend/cudnn/tensor_allocator.h"

#include <cstdint>
#include <limits>
#include <new>
#include <utility>

#include "worker/backend/cudnn/checks.h"
#include "worker/tensor/tensor.h"

namespace phub::worker::cudnn {
namespace {

void* PoolAllocate(std::size_t bytes) {
  void* p = nullptr;
  const cudaError_t error = cudaMallocAsync(&p, bytes, cudaStreamLegacy);
  if (error == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    throw std::bad_alloc();  // the DeviceAllocator contract
  }
  PHUB_CUDA_CHECK(error);
  return p;
}

void PoolFree(void* p) {
  // May run at exit after the runtime is gone: nothing to report to, and a deleter must not throw.
  (void)cudaFreeAsync(p, cudaStreamLegacy);
}

void UseUncachedAllocations(DeviceAllocator& a) {
  a.allocate = [](std::size_t bytes) {
    void* p = nullptr;
    const cudaError_t error = cudaMalloc(&p, bytes);
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      throw std::bad_alloc();
    }
    PHUB_CUDA_CHECK(error);
    return p;
  };
  a.free = [](void* p) { (void)cudaFree(p); };
}

}  // namespace

void InstallTensorAllocator(int device) {
  int pools = 0;
  PHUB_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  DeviceAllocator allocator;
  if (pools == 0) {
    // Some virtualised GPUs have no memory pools: plain, uncached allocations.
    UseUncachedAllocations(allocator);
  } else {
    // By default the pool returns freed memory to the driver at every synchronisation; keep it.
    cudaMemPool_t pool = nullptr;
    PHUB_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    std::uint64_t keep = std::numeric_limits<std::uint64_t>::max();
    PHUB_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    allocator.allocate = PoolAllocate;
    allocator.free = PoolFree;
  }
  SetDeviceAllocator(Device::kCuda, std::move(allocator));
}

}  // namespace phub::worker::cudnn
