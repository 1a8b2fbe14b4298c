// Tensor: a float32 array with a shape, living in host or device memory. Copies share the
// storage (like a handle); Clone() copies the bytes. Host storage is 64-byte aligned (oneDNN and
// AVX-512 loads prefer it); device storage comes from the CUDA backend's allocator, so this file
// needs no CUDA.
//
// Layout: images are NCHW on the CPU. oneDNN's convolutions pick blocked layouts internally and
// reorder at the edges; giving every layer plain NCHW keeps the Layer API and the reference
// tests simple, and the reorders are measured in bench/train. cuDNN runs fastest on NHWC with
// tensor cores, so device tensors may be NHWC: the shape still lists N, C, H, W.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "phub/common/status.h"
#include "worker/tensor/shape.h"

namespace phub::worker {

enum class Device { kCpu, kCuda };
enum class Layout { kNCHW, kNHWC };

const char* DeviceName(Device device);

// Device memory for tensors: the CUDA backend installs one (worker/backend/cudnn); host memory
// needs none. `allocate` returns ResourceExhausted when the device is out of memory (any other
// error as what it is); it never throws. `free` must not fail and must not throw.
struct DeviceAllocator {
  std::function<StatusOr<void*>(std::size_t bytes)> allocate;
  std::function<void(void*)> free;
};
// InvalidArgument for Device::kCpu (host memory has its own allocator). Thread-safe.
Status SetDeviceAllocator(Device device, DeviceAllocator allocator);

class Tensor {
 public:
  Tensor() = default;  // empty: no storage, rank 0, numel 0

  // Uninitialised storage for `shape` on `device`: InvalidArgument for a negative dimension,
  // ResourceExhausted when the host or the device is out of memory, FailedPrecondition for a
  // device tensor before a device backend installed its allocator.
  static StatusOr<Tensor> Allocate(const Shape& shape, Device device = Device::kCpu,
                                   Layout layout = Layout::kNCHW);
  // Host tensors for tests and small fixed buffers: Allocate, and abort with its message if it
  // fails. Code that can report an allocation failure uses Allocate (every caller in worker/
  // does).
  static Tensor Empty(const Shape& shape);
  static Tensor Zeros(const Shape& shape);
  static Tensor Filled(const Shape& shape, float value);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  std::int64_t numel() const { return defined() ? shape_.numel() : 0; }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * sizeof(float); }
  Device device() const { return device_; }
  Layout layout() const { return layout_; }

  float* data() { return static_cast<float*>(storage_.get()); }
  const float* data() const { return static_cast<const float*>(storage_.get()); }
  // REQUIRES: a host tensor (checked: aborts otherwise, a bug in the caller).
  std::span<float> span();
  std::span<const float> span() const;

  // The same storage seen with another shape. REQUIRES: the same numel (checked: aborts
  // otherwise; layers reshape only tensors whose shapes the model has already checked).
  Tensor Reshaped(const Shape& shape) const;
  // A host tensor with a copy of the bytes, for tests. REQUIRES: a host tensor (checked); aborts
  // if the copy cannot be allocated, as Empty does.
  Tensor Clone() const;
  // "[64, 3, 224, 224] cpu".
  std::string ToString() const;

 private:
  std::shared_ptr<void> storage_;
  Shape shape_;
  Device device_ = Device::kCpu;
  Layout layout_ = Layout::kNCHW;
};

}  // namespace phub::worker
