// A float array in one GPU's memory, freed when the DeviceBuffer goes away: what tests and
// benchmarks hand to NcclAllreduce without including CUDA headers themselves.
//
// Copies are synchronous (cudaMemcpy on the legacy default stream): on return the host span
// may be reused, and the copy is ordered before NcclAllreduce's next call (its stream is
// blocking). Move-only; one thread at a time. Makes device() the calling thread's current
// CUDA device, as NcclAllreduce does.
#pragma once

#include <cstddef>
#include <span>

#include "phub/common/status.h"

namespace phub::nccl {

class DeviceBuffer {
 public:
  // `count` floats on CUDA device `device` (uninitialised). count 0 allocates nothing.
  static StatusOr<DeviceBuffer> Allocate(int device, std::size_t count);

  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  ~DeviceBuffer();

  // REQUIRES (else InvalidArgument): host.size() == size().
  Status CopyFromHost(std::span<const float> host);
  Status CopyToHost(std::span<float> host) const;

  float* data() const { return data_; }  // device memory: do not dereference on the host
  std::size_t size() const { return size_; }
  int device() const { return device_; }

 private:
  void Release();

  float* data_ = nullptr;
  std::size_t size_ = 0;
  int device_ = -1;
};

}  // namespace phub::nccl
