// A fixed-size, zero-initialised, cache-line (64-byte) aligned array of floats.
// Used for server slots, weights and optimizer state: aligned so SIMD loads never split lines,
// fixed so that addresses handed to a transport (and, for verbs, registered) never move.
// Not thread-safe; owned by one shard or one client.
#pragma once

#include <cstddef>
#include <span>

namespace phub {

class AlignedBuffer {
 public:
  static constexpr std::size_t kAlignment = 64;

  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t elements);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::size_t size() const { return size_; }
  std::span<float> span() { return {data_, size_}; }
  std::span<const float> span() const { return {data_, size_}; }

 private:
  float* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace phub
