#include "phub/kernels/wire_format.h"

#include <cassert>

#include "absl/strings/str_cat.h"
#include "phub/kernels/wire_narrow_simd.h"

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

// Plain indexed loops over __restrict pointers: GCC vectorizes the widenings and bf16's plain
// narrowing; the other narrowings run their bulk in wire_narrow_simd where the CPU can.
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
// float32 -> fp16: the bulk eight at a time where the CPU can (wire_narrow_simd.h), the rest
// one by one.
void ConvertToFp16(const float* __restrict in, Fp16* __restrict out, std::size_t n, float scale) {
  for (std::size_t i = simd::ScaleToFp16(in, out, n, scale); i < n; ++i) {
    out[i] = ToFp16(in[i] * scale);
  }
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
namespace {
// Largest finite values: what is past them is clamped (and carried to the next call).
constexpr float kBf16Max = std::bit_cast<float>(0x7f7f0000u);  // float32's max rounds to inf
constexpr float kFp16Max = 65504.0f;

template <class T, class Narrow>
void NarrowWithFeedback(const float* __restrict in, float* __restrict residual,
                        T* __restrict out, std::size_t n, float limit, Narrow narrow) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) {
    const float v = in[i] + residual[i];
    const float clamped = v > limit ? limit : (v < -limit ? -limit : v);  // NaN stays NaN
    const T q = narrow(clamped);
    out[i] = q;
    residual[i] = v - ToFloat(q);  // the excess over the limit too
  }
}
}  // namespace

void ConvertToWireWithFeedback(WireFormat format, std::span<const float> in,
                               std::span<float> residual, std::byte* wire) {
  assert(format != WireFormat::kFp32 && residual.size() == in.size());
  // The bulk in vectors where the CPU can (wire_narrow_simd.h), the rest here.
  const std::size_t n = in.size();
  if (format == WireFormat::kBf16) {
    auto* out = reinterpret_cast<Bf16*>(wire);
    const std::size_t i = simd::FeedbackToBf16(in.data(), residual.data(), out, n, kBf16Max);
    NarrowWithFeedback(in.data() + i, residual.data() + i, out + i, n - i, kBf16Max,
                       [](float x) { return ToBf16(x); });
  } else {
    auto* out = reinterpret_cast<Fp16*>(wire);
    const std::size_t i = simd::FeedbackToFp16(in.data(), residual.data(), out, n, kFp16Max);
    NarrowWithFeedback(in.data() + i, residual.data() + i, out + i, n - i, kFp16Max,
                       [](float x) { return ToFp16(x); });
  }
}

namespace {
template <class T, class Narrow>
void NarrowChange(const float* __restrict target, const float* view_in, float* view_out,
                  T* __restrict out, std::size_t n, float limit, Narrow narrow) {
  for (std::size_t i = 0; i < n; ++i) {
    float d = target[i] - view_in[i];
    d = d > limit ? limit : (d < -limit ? -limit : d);
    const T q = narrow(d);
    out[i] = q;
    view_out[i] = view_in[i] + ToFloat(q);
  }
}
template <class T>
void AddWidened(const T* __restrict in, float* __restrict view, std::size_t n) {
#pragma GCC ivdep
  for (std::size_t i = 0; i < n; ++i) view[i] += ToFloat(in[i]);
}
}  // namespace

void ConvertChangeToWire(WireFormat format, std::span<const float> target,
                         std::span<const float> view_in, std::span<float> view_out,
                         std::byte* wire) {
  assert(format != WireFormat::kFp32 && target.size() == view_in.size() &&
         view_in.size() == view_out.size());
  // The bulk in vectors where the CPU can (wire_narrow_simd.h), the rest here.
  const std::size_t n = target.size();
  const float* t = target.data();
  const float* in = view_in.data();
  float* out_view = view_out.data();
  if (format == WireFormat::kBf16) {
    auto* out = reinterpret_cast<Bf16*>(wire);
    const std::size_t i = simd::ChangeToBf16(t, in, out_view, out, n, kBf16Max);
    NarrowChange(t + i, in + i, out_view + i, out + i, n - i, kBf16Max,
                 [](float x) { return ToBf16(x); });
  } else {
    auto* out = reinterpret_cast<Fp16*>(wire);
    const std::size_t i = simd::ChangeToFp16(t, in, out_view, out, n, kFp16Max);
    NarrowChange(t + i, in + i, out_view + i, out + i, n - i, kFp16Max,
                 [](float x) { return ToFp16(x); });
  }
}

void AddFromWire(WireFormat format, const std::byte* wire, std::span<float> view) {
  assert(format != WireFormat::kFp32);
  if (format == WireFormat::kBf16) {
    AddWidened(reinterpret_cast<const Bf16*>(wire), view.data(), view.size());
  } else {
    AddWidened(reinterpret_cast<const Fp16*>(wire), view.data(), view.size());
  }
}

void ConvertScaled(std::span<const float> in, float scale, std::span<Fp16> out) {
  assert(in.size() == out.size());
  ConvertToFp16(in.data(), out.data(), in.size(), scale);
}

}  // namespace phub::kernels
