#include "worker/tensor/tensor.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "worker/tensor/check.h"

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

StatusOr<std::shared_ptr<void>> AllocateStorage(const Shape& shape, Device device) {
  const std::size_t bytes = static_cast<std::size_t>(shape.numel()) * sizeof(float);
  if (device == Device::kCpu) {
    // aligned_alloc wants a multiple of the alignment; never 0 so an empty tensor is defined.
    std::size_t rounded = std::max(kHostAlignment, (bytes + kHostAlignment - 1) / kHostAlignment *
                                                       kHostAlignment);
    void* p = std::aligned_alloc(kHostAlignment, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Tensor ", shape.ToString(), ": cannot allocate ", rounded,
                       " bytes of host memory (a smaller --batch or model, or more memory)"));
    }
    return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  }
  DeviceAllocator allocator;
  {
    std::lock_guard lock(AllocatorMutex());
    allocator = CudaAllocator();
  }
  if (!allocator.allocate) {
    return absl::FailedPreconditionError(
        absl::StrCat("Tensor ", shape.ToString(),
                     " on cuda: no device allocator installed ("
                     "create the cuDNN backend before allocating device tensors)"));
  }
  StatusOr<void*> p = allocator.allocate(std::max<std::size_t>(bytes, 1));
  if (!p.ok()) {
    return Status(p.status().code(),
                  absl::StrCat("Tensor ", shape.ToString(), " on cuda: ", p.status().message()));
  }
  return std::shared_ptr<void>(*p, allocator.free);
}

// For the helpers that have no way to report: a test's or a fixed buffer's allocation.
Tensor OrDie(StatusOr<Tensor> t) {
  if (!t.ok()) {
    std::fprintf(stderr, "phub worker: %s\n", std::string(t.status().message()).c_str());
    std::abort();
  }
  return *std::move(t);
}

}  // namespace

const char* DeviceName(Device device) { return device == Device::kCpu ? "cpu" : "cuda"; }

Status SetDeviceAllocator(Device device, DeviceAllocator allocator) {
  if (device != Device::kCuda) {
    return absl::InvalidArgumentError("SetDeviceAllocator: only cuda tensors take one");
  }
  std::lock_guard lock(AllocatorMutex());
  CudaAllocator() = std::move(allocator);
  return absl::OkStatus();
}

StatusOr<Tensor> Tensor::Allocate(const Shape& shape, Device device, Layout layout) {
  for (std::int64_t d : shape.dims()) {
    if (d < 0) {
      return absl::InvalidArgumentError("Tensor: negative dimension in " + shape.ToString());
    }
  }
  Tensor t;
  t.shape_ = shape;
  t.device_ = device;
  t.layout_ = layout;
  PHUB_ASSIGN_OR_RETURN(t.storage_, AllocateStorage(shape, device));
  return t;
}

Tensor Tensor::Empty(const Shape& shape) { return OrDie(Allocate(shape)); }

Tensor Tensor::Zeros(const Shape& shape) { return Filled(shape, 0.0f); }

Tensor Tensor::Filled(const Shape& shape, float value) {
  Tensor t = Empty(shape);
  std::fill_n(t.data(), t.numel(), value);
  return t;
}

std::span<float> Tensor::span() {
  PHUB_WORKER_CHECK(device_ == Device::kCpu, "Tensor::span on a device tensor " + ToString());
  return {data(), static_cast<std::size_t>(numel())};
}

std::span<const float> Tensor::span() const {
  PHUB_WORKER_CHECK(device_ == Device::kCpu, "Tensor::span on a device tensor " + ToString());
  return {data(), static_cast<std::size_t>(numel())};
}

Tensor Tensor::Reshaped(const Shape& shape) const {
  PHUB_WORKER_CHECK(shape.numel() == numel(),
                    absl::StrCat("Tensor::Reshaped: ", shape_.ToString(), " has ", numel(),
                                 " elements, ", shape.ToString(), " has ", shape.numel()));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::Clone() const {
  PHUB_WORKER_CHECK(device_ == Device::kCpu,
                    "Tensor::Clone of a device tensor: copy it through its backend");
  Tensor t = OrDie(Allocate(shape_, device_, layout_));
  if (numel() > 0) std::memcpy(t.data(), data(), bytes());
  return t;
}

std::string Tensor::ToString() const {
  return absl::StrCat(shape_.ToString(), " ", DeviceName(device_),
                      layout_ == Layout::kNHWC ? " nhwc" : "");
}

}  // namespace phub::worker
