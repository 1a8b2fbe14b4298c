#include "phub/kernels/wire_narrow_simd.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace phub::kernels::simd {

#if defined(__x86_64__)

// Everything below is compiled for AVX2 + F16C whatever the build targets, and only called
// once Available() said the CPU has them.
#define PHUB_SIMD __attribute__((target("avx2,f16c")))

bool Available() {
  static const bool have = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    // "avx2" also checks that the OS saves the YMM registers; F16C is CPUID.1:ECX bit 29.
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
  }();
  return have;
}

namespace {

// v clamped to +-limit. min and max return their second operand when either is NaN, so a NaN
// passes through, as the one-element clamp's compares let it. (A blend on a compare was
// compiled back into per-lane branches by GCC in a portable build.)
PHUB_SIMD inline __m256 Clamp(__m256 v, __m256 limit) {
  const __m256 low = _mm256_sub_ps(_mm256_setzero_ps(), limit);
  return _mm256_max_ps(low, _mm256_min_ps(limit, v));
}

// Eight floats narrowed to fp16, packed into 128 bits; `wide` gets them widened back.
// vcvtps2ph rounds to nearest even as ToFp16 does; vcvtph2ps widens exactly as ToFloat does.
struct ToFp16x8 {
  PHUB_SIMD static __m128i Narrow(__m256 v, __m256& wide) {
    const __m128i q = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    wide = _mm256_cvtph_ps(q);
    return q;
  }
};

// The same to bf16, ToBf16's integer rounding (add 0x7fff plus the kept lowest bit, keep the
// top half) and its NaN case (the top half with the quiet bit) as a blend.
struct ToBf16x8 {
  PHUB_SIMD static __m128i Narrow(__m256 v, __m256& wide) {
    const __m256i u = _mm256_castps_si256(v);
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7fff)), odd), 16);
    const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    const __m256i nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000));
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(0x40));
    r = _mm256_blendv_epi8(r, quiet, nan);
    wide = _mm256_castsi256_ps(_mm256_slli_epi32(r, 16));
    // Each lane's result is in its low 16 bits: pack (within each 128-bit half), then take
    // 64-bit quarters 0 and 2.
    const __m256i packed = _mm256_packus_epi32(r, r);
    return _mm256_castsi256_si128(_mm256_permute4x64_epi64(packed, 0x08));
  }
};

template <class To, class T>
PHUB_SIMD std::size_t FeedbackLoop(const float* __restrict in, float* __restrict residual,
                                   T* __restrict out, std::size_t n, float limit) {
  const __m256 l = _mm256_set1_ps(limit);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_add_ps(_mm256_loadu_ps(in + i), _mm256_loadu_ps(residual + i));
    __m256 wide;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), To::Narrow(Clamp(v, l), wide));
    _mm256_storeu_ps(residual + i, _mm256_sub_ps(v, wide));
  }
  return i;
}

// view_in may be view_out: each block of eight is read before it is written.
template <class To, class T>
PHUB_SIMD std::size_t ChangeLoop(const float* __restrict target, const float* view_in,
                                 float* view_out, T* __restrict out, std::size_t n, float limit) {
  const __m256 l = _mm256_set1_ps(limit);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 before = _mm256_loadu_ps(view_in + i);
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(target + i), before);
    __m256 wide;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), To::Narrow(Clamp(d, l), wide));
    _mm256_storeu_ps(view_out + i, _mm256_add_ps(before, wide));
  }
  return i;
}

PHUB_SIMD std::size_t ScaleLoop(const float* __restrict in, Fp16* __restrict out, std::size_t n,
                                float scale) {
  const __m256 s = _mm256_set1_ps(scale);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wide;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     ToFp16x8::Narrow(_mm256_mul_ps(_mm256_loadu_ps(in + i), s), wide));
  }
  return i;
}

}  // namespace

std::size_t ScaleToFp16(const float* in, Fp16* out, std::size_t n, float scale) {
  return Available() ? ScaleLoop(in, out, n, scale) : 0;
}
std::size_t FeedbackToBf16(const float* in, float* residual, Bf16* out, std::size_t n,
                           float limit) {
  return Available() ? FeedbackLoop<ToBf16x8>(in, residual, out, n, limit) : 0;
}
std::size_t FeedbackToFp16(const float* in, float* residual, Fp16* out, std::size_t n,
                           float limit) {
  return Available() ? FeedbackLoop<ToFp16x8>(in, residual, out, n, limit) : 0;
}
std::size_t ChangeToBf16(const float* target, const float* view_in, float* view_out, Bf16* out,
                         std::size_t n, float limit) {
  return Available() ? ChangeLoop<ToBf16x8>(target, view_in, view_out, out, n, limit) : 0;
}
std::size_t ChangeToFp16(const float* target, const float* view_in, float* view_out, Fp16* out,
                         std::size_t n, float limit) {
  return Available() ? ChangeLoop<ToFp16x8>(target, view_in, view_out, out, n, limit) : 0;
}

#else  // not x86-64: the one-element loops do everything

bool Available() { return false; }
std::size_t ScaleToFp16(const float*, Fp16*, std::size_t, float) { return 0; }
std::size_t FeedbackToBf16(const float*, float*, Bf16*, std::size_t, float) { return 0; }
std::size_t FeedbackToFp16(const float*, float*, Fp16*, std::size_t, float) { return 0; }
std::size_t ChangeToBf16(const float*, const float*, float*, Bf16*, std::size_t, float) {
  return 0;
}
std::size_t ChangeToFp16(const float*, const float*, float*, Fp16*, std::size_t, float) {
  return 0;
}

#endif

}  // namespace phub::kernels::simd
