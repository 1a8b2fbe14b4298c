// What the aggregation benchmarks share (aggregation_bench.cc: one core; multicore_bench.cc:
// C cores at once): bench arrays, the stream-only reference loops the kernel is measured
// against, the median, and reading "key: value" files of /proc.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <new>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace phub::bench {

// The sum_into_n reference exists for N up to this many inputs.
constexpr int kMaxReferenceInputs = 8;

// A float array for the bench: 2 MiB aligned (so huge pages can back all of it), optionally
// advised to use transparent huge pages before its first touch, then filled.
class BenchArray {
 public:
  BenchArray(std::size_t n, bool huge_pages) : n_(n) {
    constexpr std::size_t kAlign = std::size_t{2} << 20;
    const std::size_t bytes = (n * sizeof(float) + kAlign - 1) / kAlign * kAlign;
    data_ = static_cast<float*>(std::aligned_alloc(kAlign, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    if (huge_pages) madvise(data_, bytes, MADV_HUGEPAGE);  // Advice only: ignore failure.
  }
  ~BenchArray() { std::free(data_); }
  BenchArray(BenchArray&& o) noexcept : data_(std::exchange(o.data_, nullptr)), n_(o.n_) {}
  BenchArray(const BenchArray&) = delete;
  BenchArray& operator=(const BenchArray&) = delete;
  BenchArray& operator=(BenchArray&&) = delete;

  float* data() const { return data_; }
  std::span<float> span() const { return {data_, n_}; }
  void FillRandom(std::uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (float& x : span()) x = dist(rng);
  }

 private:
  float* data_ = nullptr;
  std::size_t n_ = 0;
};

// dst[i] += src[i]: the reference loop. noinline so it is compiled as a plain streaming loop.
[[gnu::noinline]] inline void SumInto(float* __restrict dst, const float* __restrict src, std::size_t n) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) dst[i] += src[i];
}

// dst[i] += s[0][i] + ... + s[K-1][i], one plain loop over K + 1 streams.
template <int K>
[[gnu::noinline]] inline void SumIntoK(float* __restrict dst, const float* const* s, std::size_t n) {
  const float* __restrict p[K];
  for (int k = 0; k < K; ++k) p[k] = s[k];
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) {
    float sum = p[0][i];
#pragma GCC unroll 8
    for (int k = 1; k < K; ++k) sum += p[k][i];
    dst[i] += sum;
  }
}

// The same over bf16 inputs, widened as they are read (the reference for the kernel's
// --wire bf16 rows): (2N + 8) bytes per element.
template <int K>
[[gnu::noinline]] inline void SumIntoKBf16(float* __restrict dst, const std::uint16_t* const* s,
                                           std::size_t n) {
  const std::uint16_t* __restrict p[K];
  for (int k = 0; k < K; ++k) p[k] = s[k];
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) {
    float sum = std::bit_cast<float>(std::uint32_t{p[0][i]} << 16);
#pragma GCC unroll 8
    for (int k = 1; k < K; ++k) sum += std::bit_cast<float>(std::uint32_t{p[k][i]} << 16);
    dst[i] += sum;
  }
}

template <int... Ks>
inline void SumIntoNBf16(std::integer_sequence<int, Ks...>, int n_in, float* dst,
                         const std::uint16_t* const* s, std::size_t n) {
  ((n_in == Ks + 1 ? SumIntoKBf16<Ks + 1>(dst, s, n) : void()), ...);
}

template <int... Ks>
inline void SumIntoN(std::integer_sequence<int, Ks...>, int n_in, float* dst, const float* const* s,
              std::size_t n) {
  ((n_in == Ks + 1 ? SumIntoK<Ks + 1>(dst, s, n) : void()), ...);
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t mid = v.size() / 2;
  return v.size() % 2 ? v[mid] : 0.5 * (v[mid - 1] + v[mid]);
}

// First value of `key` in a "key: value" file such as /proc/cpuinfo, or "".
inline std::string ProcField(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      const auto value = line.find_first_not_of(" \t", colon + 1);
      return value == std::string::npos ? "" : line.substr(value);
    }
  }
  return "";
}


}  // namespace phub::bench
