// The element formats gradients and weights may travel in (`--wire`), and the conversions
// between them and float32. Compact formats halve the bytes on the wire; phubd still sums in
// float32 into float32 master weights and optimizer state (aggregate_and_step.h).
//
//   fp32  IEEE binary32, as the model holds it (4 bytes)
//   bf16  bfloat16: binary32's sign, 8-bit exponent and top 7 mantissa bits (2 bytes); the same
//         range as float32, ~3 significant digits: gradients fit without scaling
//   fp16  IEEE binary16 (2 bytes): 10 mantissa bits but a range of 6e-8 .. 65504: alone, small
//         gradients underflow and large ones overflow; with error feedback (below) neither is
//         lost, only delayed, so no loss scaling is needed (docs/design.md "The compact wire")
//
// Conversions to the compact formats round to nearest, ties to even (what hardware and
// PyTorch's .to(bfloat16/float16) do); values past the format's range become infinity; NaN
// stays NaN. Pure functions over spans, thread-compatible, no allocation, auto-vectorized.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "phub/common/status.h"

namespace phub::kernels {

enum class WireFormat : std::uint8_t { kFp32 = 0, kBf16 = 1, kFp16 = 2 };

// Bytes one element takes on the wire: 4, 2, 2.
std::size_t WireBytes(WireFormat format);
// "fp32", "bf16", "fp16" <-> format; Parse returns InvalidArgument listing the accepted names.
StatusOr<WireFormat> ParseWireFormat(const std::string& name);
std::string WireFormatName(WireFormat format);
// The largest n such that every integer 0..n travels exactly in `format`: its mantissa's bits
// plus the implicit one (2^24 fp32, 2^11 = 2048 fp16, 2^8 = 256 bf16). A count sent as an
// element (racks of racks: a rack's sum carries its counts of copies and members) must stay
// within it.
inline constexpr std::uint32_t MaxExactInteger(WireFormat format) {
  return format == WireFormat::kFp32   ? (1u << 24)
         : format == WireFormat::kFp16 ? (1u << 11)
                                       : (1u << 8);
}

// One element of each compact format, as its bits (strong types, so a span of one is never
// passed where the other is meant).
struct Bf16 {
  std::uint16_t bits;
};
struct Fp16 {
  std::uint16_t bits;
};
static_assert(sizeof(Bf16) == 2 && sizeof(Fp16) == 2);

// bf16 -> float32 is exact: the bits are float32's top half.
inline float ToFloat(Bf16 x) { return std::bit_cast<float>(std::uint32_t{x.bits} << 16); }
inline float ToFloat(float x) { return x; }
// float32 -> bf16, round to nearest even; NaN stays a (quiet) NaN.
inline Bf16 ToBf16(float x) {
  const std::uint32_t u = std::bit_cast<std::uint32_t>(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return Bf16{static_cast<std::uint16_t>((u >> 16) | 0x40)};
  return Bf16{static_cast<std::uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16)};
}
// fp16 -> float32, exact, in integer and float operations a vectorizer keeps in vectors: the
// half's exponent and mantissa moved into float32's fields, rebased by multiplying by 2^112
// (exact: subnormal halves come out normal), infinity and NaN (all-ones exponent) given
// float32's all-ones exponent. That choice is an integer mask, not an `if`: GCC vectorizes a
// branch in this loop only where AVX-512 can mask it, so with an `if` a portable (SSE2) or
// AVX2 build widened one element at a time, 3.3-3.4x slower (docs/benchmarks.md, fp16).
inline float ToFloat(Fp16 x) {
  const std::uint32_t em = x.bits & 0x7fffu;
  const float rebased_value = std::bit_cast<float>(em << 13) * 0x1p112f;
  const std::uint32_t rebased = std::bit_cast<std::uint32_t>(rebased_value);
  const std::uint32_t special = (em << 13) | 0x7f800000u;
  // All ones for infinity and NaN, else 0.
  const std::uint32_t is_special = 0u - static_cast<std::uint32_t>(em >= 0x7c00u);
  const std::uint32_t magnitude = (rebased & ~is_special) | (special & is_special);
  return std::bit_cast<float>(magnitude | (std::uint32_t{x.bits} & 0x8000u) << 16);
}
// float32 -> fp16, round to nearest even, overflow to infinity, NaN to a quiet NaN; in integer
// and float operations (not every compiler has _Float16 on every target: clang 14 on x86
// does not). Normal results: rebias the exponent and round the 13 dropped bits to even by
// adding 0xfff plus the kept mantissa's lowest bit; subnormal results: let the FPU do the
// rounding by adding a float whose exponent puts the half's last mantissa bit at float32's.
inline Fp16 ToFp16(float x) {
  std::uint32_t f = std::bit_cast<std::uint32_t>(x);
  const std::uint32_t sign = (f >> 16) & 0x8000u;
  f &= 0x7fffffffu;
  std::uint32_t h;
  if (f >= 0x47800000u) {  // >= 65536 (everything from 65520 up rounds there below), inf, NaN
    h = f > 0x7f800000u ? 0x7e00u : 0x7c00u;
  } else if (f < 0x38800000u) {  // under 2^-14: a subnormal half, or zero
    constexpr std::uint32_t kMagic = ((127 - 15) + (23 - 10) + 1) << 23;  // 0.5f
    h = std::bit_cast<std::uint32_t>(std::bit_cast<float>(f) + std::bit_cast<float>(kMagic)) -
        kMagic;
  } else {
    const std::uint32_t odd = (f >> 13) & 1u;
    h = (f + (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu + odd) >> 13;
  }
  return Fp16{static_cast<std::uint16_t>(h | sign)};
}

// Whole arrays. REQUIRES: in.size() == out.size(); no overlap.
void Convert(std::span<const float> in, std::span<Bf16> out);
void Convert(std::span<const Bf16> in, std::span<float> out);
void Convert(std::span<const float> in, std::span<Fp16> out);
void Convert(std::span<const Fp16> in, std::span<float> out);
// The same by a format chosen at run time, over raw bytes (a compact format's staging buffer):
// `wire` holds in.size() (or out.size()) elements of `format`, which must not be kFp32.
void ConvertToWire(WireFormat format, std::span<const float> in, std::byte* wire);
void ConvertFromWire(WireFormat format, const std::byte* wire, std::span<float> out);
// Error feedback (Seide et al., "1-bit SGD", 2014; Karimireddy et al., "EF-SGD", 2019): what
// rounding drops is carried to the next call instead of lost. Per element:
//   v = in + residual  (float32),
//   wire = v clamped to the format's largest finite value (fp16: 65504) and rounded to it,
//   residual = v - wire  (exact in float32 unless v is past the limit).
// So the sum of everything sent plus the residual equals the sum of everything given (up to
// float32's rounding of the additions): rounding errors do not accumulate over iterations, and
// values under fp16's range add up in the residual until they are sent. `residual` starts at
// zero and belongs to one stream of values (one tensor's gradients, one chunk's weight changes).
// REQUIRES: format != kFp32; residual.size() == in.size(); `wire` holds in.size() elements.
void ConvertToWireWithFeedback(WireFormat format, std::span<const float> in,
                               std::span<float> residual, std::byte* wire);

// Weights in a compact format without training on rounded weights (docs/design.md "The compact
// wire"): phubd keeps `view`, the float32 weights every worker holds, and sends only their
// change, rounded; both sides add the same rounded change to the same float32 view, so they
// stay bit-identical, and the view trails the master weights by one rounding of one step's
// change (what rounding drops is in the next change). Per element:
//   wire = (target - view_in) clamped and rounded to the format,  view_out = view_in + wire.
// view_out may be view_in (in place). REQUIRES: format != kFp32; equal sizes.
void ConvertChangeToWire(WireFormat format, std::span<const float> target,
                         std::span<const float> view_in, std::span<float> view_out,
                         std::byte* wire);
// The worker's half: view += wire (the same float32 addition as ConvertChangeToWire's).
void AddFromWire(WireFormat format, const std::byte* wire, std::span<float> view);

// out = in * scale, then rounded to the format (fp16 loss scaling on the sender). Scaling is in
// float32 and exact for powers of two.
void ConvertScaled(std::span<const float> in, float scale, std::span<Fp16> out);

}  // namespace phub::kernels
