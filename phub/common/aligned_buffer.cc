#include "phub/common/aligned_buffer.h"

#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

namespace phub {

AlignedBuffer::AlignedBuffer(std::size_t elements) : size_(elements) {
  if (elements == 0) return;
  std::size_t bytes = elements * sizeof(float);
  bytes = (bytes + kAlignment - 1) / kAlignment * kAlignment;  // aligned_alloc wants a multiple
  data_ = static_cast<float*>(std::aligned_alloc(kAlignment, bytes));
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, bytes);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

}  // namespace phub
