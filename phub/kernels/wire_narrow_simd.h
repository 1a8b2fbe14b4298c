// The compact wire's narrowing loops (wire_format.cc) eight elements at a time, for CPUs with
// AVX2 and F16C, chosen at run time rather than by the build's -march: portable builds (the
// GPU bundle, a VM guest) get them too. The one-element conversions branch (NaN; fp16's three
// ranges), which keeps GCC from vectorizing the loops that narrow with error feedback or as
// changes: they ran at 3-7x the time of the memory streams they touch (bench/aggregation/
// wire_bench). Each function here does the longest multiple of eight elements it can and
// returns how many (0 on a CPU without AVX2 and F16C, or off x86-64); the caller's one-element
// loop does the rest. Bit for bit the one-element definitions, a NaN's payload aside (both
// stay NaN): WireFormatTest.FeedbackAndChangeKernelsEqualTheirDefinitions*.
#pragma once

#include <cstddef>

#include "phub/kernels/wire_format.h"

namespace phub::kernels::simd {

// AVX2 and F16C here (and the OS saving their registers).
bool Available();

// out = in * scale narrowed (ConvertScaled, Convert to fp16).
std::size_t ScaleToFp16(const float* in, Fp16* out, std::size_t n, float scale);
// ConvertToWireWithFeedback's loop: v = in + residual, clamped to +-limit and narrowed into
// out; residual = v - out widened.
std::size_t FeedbackToBf16(const float* in, float* residual, Bf16* out, std::size_t n, float limit);
std::size_t FeedbackToFp16(const float* in, float* residual, Fp16* out, std::size_t n, float limit);
// ConvertChangeToWire's loop: d = target - view_in, clamped and narrowed into out;
// view_out = view_in + out widened. view_in may be view_out.
std::size_t ChangeToBf16(const float* target, const float* view_in, float* view_out, Bf16* out,
                         std::size_t n, float limit);
std::size_t ChangeToFp16(const float* target, const float* view_in, float* view_out, Fp16* out,
                         std::size_t n, float limit);

}  // namespace phub::kernels::simd
