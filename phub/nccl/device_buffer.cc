#include "phub/nccl/device_buffer.h"

#include <cuda_runtime.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "phub/nccl/detail/checks.h"

namespace phub::nccl {
namespace {

Status CheckSize(std::size_t host, std::size_t device, const char* direction) {
  if (host == device) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("DeviceBuffer::", direction, ": host span of ",
                                                 host, " floats, device buffer of ", device,
                                                 ": sizes must match"));
}

}  // namespace

StatusOr<DeviceBuffer> DeviceBuffer::Allocate(int device, std::size_t count) {
  DeviceBuffer buffer;
  buffer.device_ = device;
  if (count == 0) return buffer;
  PHUB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  void* memory = nullptr;
  PHUB_CUDA_RETURN_IF_ERROR(cudaMalloc(&memory, count * sizeof(float)));
  buffer.data_ = static_cast<float*>(memory);
  buffer.size_ = count;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      device_(other.device_) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    device_ = other.device_;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { Release(); }

void DeviceBuffer::Release() {
  if (data_ == nullptr) return;
  (void)cudaSetDevice(device_);
  (void)cudaFree(data_);  // synchronizes the device: no kernel still reads the memory
  data_ = nullptr;
  size_ = 0;
}

Status DeviceBuffer::CopyFromHost(std::span<const float> host) {
  PHUB_RETURN_IF_ERROR(CheckSize(host.size(), size_, "CopyFromHost"));
  if (size_ == 0) return absl::OkStatus();
  PHUB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  PHUB_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(data_, host.data(), size_ * sizeof(float), cudaMemcpyHostToDevice));
  return absl::OkStatus();
}

Status DeviceBuffer::CopyToHost(std::span<float> host) const {
  PHUB_RETURN_IF_ERROR(CheckSize(host.size(), size_, "CopyToHost"));
  if (size_ == 0) return absl::OkStatus();
  PHUB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device_));
  PHUB_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host.data(), data_, size_ * sizeof(float), cudaMemcpyDeviceToHost));
  return absl::OkStatus();
}

}  // namespace phub::nccl
