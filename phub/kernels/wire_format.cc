#include "phub/kernels/wire_format.h"

#include <cassert>

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

#include "absl/strings/str_cat.h"

namespace phub::kernels {

std::size_t WireBytes(WireFormat format) { return format == WireFormat::kFp32 ? 4 : 2; }

StatusOr<WireFormat> ParseWireFormat(const std::string& name) {
  if (name == "fp32") return WireFormat::kFp32;
  if (name == "bf16") return WireFormat::kBf16;
  if (name == "fp16") return WireFormat::kFp16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown wire format '", name, "': use fp32, bf16 or fp16"));
}

std::string WireFormatName(WireFormat format) {
  switch (format) {
    case WireFormat::kFp32:
      return "fp32";
    case WireFormat::kBf16:
      return "bf16";
    case WireFormat::kFp16:
      return "fp16";
  }
  return absl::StrCat("wire format ", static_cast<int>(format));
}

// Plain indexed loops over __restrict pointers: GCC vectorizes the bf16 ones with integer
// shifts and blends, the fp16 ones with vcvtps2ph/vcvtph2ps where F16C is enabled.
namespace {
template <class From, class To, class Fn>
void Map(const From* __restrict in, To* __restrict out, std::size_t n, Fn fn) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) out[i] = fn(in[i]);
}

void ConvertToFp16(const float* __restrict in, Fp16* __restrict out, std::size_t n, float scale);
}  // namespace

void Convert(std::span<const float> in, std::span<Bf16> out) {
  assert(in.size() == out.size());
  Map(in.data(), out.data(), in.size(), [](float x) { return ToBf16(x); });
}
void Convert(std::span<const Bf16> in, std::span<float> out) {
  assert(in.size() == out.size());
  Map(in.data(), out.data(), in.size(), [](Bf16 x) { return ToFloat(x); });
}
namespace {
// float32 -> fp16 eight at a time with F16C's vcvtps2ph where the build targets it (rounding
// to nearest even, as ToFp16), the rest one by one.
void ConvertToFp16(const float* __restrict in, Fp16* __restrict out, std::size_t n, float scale) {
  std::size_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  const __m256 s = _mm256_set1_ps(scale);
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(in + i), s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
#endif
  for (; i < n; ++i) out[i] = ToFp16(in[i] * scale);
}
}  // namespace

void Convert(std::span<const float> in, std::span<Fp16> out) {
  assert(in.size() == out.size());
  ConvertToFp16(in.data(), out.data(), in.size(), 1.0f);
}
void Convert(std::span<const Fp16> in, std::span<float> out) {
  assert(in.size() == out.size());
  Map(in.data(), out.data(), in.size(), [](Fp16 x) { return ToFloat(x); });
}
void ConvertToWire(WireFormat format, std::span<const float> in, std::byte* wire) {
  assert(format != WireFormat::kFp32);
  if (format == WireFormat::kBf16) {
    Convert(in, std::span(reinterpret_cast<Bf16*>(wire), in.size()));
  } else {
    Convert(in, std::span(reinterpret_cast<Fp16*>(wire), in.size()));
  }
}
void ConvertFromWire(WireFormat format, const std::byte* wire, std::span<float> out) {
  assert(format != WireFormat::kFp32);
  if (format == WireFormat::kBf16) {
    Convert(std::span(reinterpret_cast<const Bf16*>(wire), out.size()), out);
  } else {
    Convert(std::span(reinterpret_cast<const Fp16*>(wire), out.size()), out);
  }
}
void ConvertScaled(std::span<const float> in, float scale, std::span<Fp16> out) {
  assert(in.size() == out.size());
  ConvertToFp16(in.data(), out.data(), in.size(), scale);
}

}  // namespace phub::kernels
