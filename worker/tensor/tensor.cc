#include "worker/tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <stdexcept>

#include "absl/strings/str_cat.h"

namespace phub::worker {
namespace {

constexpr std::size_t kHostAlignment = 64;

std::mutex& AllocatorMutex() {
  static std::mutex m;
  return m;
}
DeviceAllocator& CudaAllocator() {
  static DeviceAllocator a;
  return a;
}

std::shared_ptr<void> Allocate(std::size_t bytes, Device device) {
  if (device == Device::kCpu) {
    // aligned_alloc wants a multiple of the alignment; never 0 so an empty tensor is defined.
    std::size_t rounded = std::max(kHostAlignment, (bytes + kHostAlignment - 1) / kHostAlignment *
                                                       kHostAlignment);
    void* p = std::aligned_alloc(kHostAlignment, rounded);
    if (p == nullptr) throw std::bad_alloc();
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  DeviceAllocator allocator;
  {
    std::lock_guard lock(AllocatorMutex());
    allocator = CudaAllocator();
  }
  if (!allocator.allocate) {
    throw std::logic_error("Tensor::Empty on cuda: no device allocator installed (create the "
                           "cuDNN backend before allocating device tensors)");
  }
  void* p = allocator.allocate(std::max<std::size_t>(bytes, 1));
  return std::shared_ptr<void>(p, allocator.free);
}

}  // namespace

const char* DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

void SetDeviceAllocator(Device device, DeviceAllocator allocator) {
  if (device != Device::kCuda) throw std::invalid_argument("SetDeviceAllocator: cuda only");
  std::lock_guard lock(AllocatorMutex());
  CudaAllocator() = std::move(allocator);
}

Tensor Tensor::Empty(const Shape& shape, Device device, Layout layout) {
  for (std::int64_t d : shape.dims()) {
    if (d < 0) throw std::invalid_argument("Tensor: negative dimension in " + shape.ToString());
  }
  Tensor t;
  t.shape_ = shape;
  t.device_ = device;
  t.layout_ = layout;
  t.storage_ = Allocate(static_cast<std::size_t>(shape.numel()) * sizeof(float), device);
  return t;
}

Tensor Tensor::Zeros(const Shape& shape) { return Filled(shape, 0.0f); }

Tensor Tensor::Filled(const Shape& shape, float value) {
  Tensor t = Empty(shape);
  std::fill_n(t.data(), t.numel(), value);
  return t;
}

std::span<float> Tensor::span() {
  if (device_ != Device::kCpu) throw std::logic_error("Tensor::span on a device tensor");
  return {data(), static_cast<std::size_t>(numel())};
}

std::span<const float> Tensor::span() const {
  if (device_ != Device::kCpu) throw std::logic_error("Tensor::span on a device tensor");
  return {data(), static_cast<std::size_t>(numel())};
}

Tensor Tensor::Reshaped(const Shape& shape) const {
  if (shape.numel() != numel()) {
    throw std::invalid_argument(absl::StrCat("Tensor::Reshaped: ", shape_.ToString(), " has ",
                                             numel(), " elements, ", shape.ToString(), " has ",
                                             shape.numel()));
  }
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Clone() const {
  if (device_ != Device::kCpu) throw std::logic_error("Tensor::Clone of a device tensor: copy "
                                                      "it through its backend");
  Tensor t = Empty(shape_, device_, layout_);
  if (numel() > 0) std::memcpy(t.data(), data(), bytes());
  return t;
}

std::string Tensor::ToString() const {
  return absl::StrCat(shape_.ToString(), " ", DeviceName(device_),
                      layout_ == Layout::kNHWC ? " nhwc" : "");
}

}  // namespace phub::worker
