// The wire formats' conversions (wire_format.h) against an independent reference: every finite
// value of the format decoded from its fields by the textbook formula into a double, and the
// nearest of them found by search, ties to the even bit pattern, past the largest finite value
// by half an ulp: infinity. Random floats over the whole range (random bit patterns), exact
// midpoints, subnormals, the edges of the range; every bit pattern of the format back and forth.
// Then the array forms against the scalar ones, and AggregateAndStep over bf16/fp16 inputs
// against the float kernel given the same values widened first (bit for bit) and against a
// float64 loop.
#include "phub/kernels/wire_format.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "phub/kernels/aggregate_and_step.h"

namespace phub::kernels {
namespace {

// A binary format with `exp_bits` of exponent and `man_bits` of mantissa (bf16: 8, 7; fp16: 5,
// 10), decoded by formula: (-1)^s * 2^(e - bias) * (1 + m / 2^man) or subnormal 2^(1-bias) * m /
// 2^man. The reference knows nothing of float32's bits.
struct Format {
  int exp_bits, man_bits;
  double Decode(std::uint16_t bits) const {
    const int sign = bits >> (exp_bits + man_bits);
    const int e = (bits >> man_bits) & ((1 << exp_bits) - 1);
    const int m = bits & ((1 << man_bits) - 1);
    const int bias = (1 << (exp_bits - 1)) - 1;
    const double mag = e == 0 ? std::ldexp(static_cast<double>(m), 1 - bias - man_bits)
                              : std::ldexp(1.0 + std::ldexp(static_cast<double>(m), -man_bits),
                                           e - bias);
    return sign ? -mag : mag;
  }
  bool IsFinite(std::uint16_t bits) const {
    return ((bits >> man_bits) & ((1 << exp_bits) - 1)) != (1 << exp_bits) - 1;
  }
  std::uint16_t Inf(bool negative) const {
    return static_cast<std::uint16_t>(((1 << exp_bits) - 1) << man_bits |
                                      (negative ? 1 << (exp_bits + man_bits) : 0));
  }
};
constexpr Format kBf16Format{8, 7};
constexpr Format kFp16Format{5, 10};

// The nearest finite non-negative value's bits (sign added after), ties to even bits.
class Nearest {
 public:
  explicit Nearest(Format f) : f_(f) {
    // The finite non-negative patterns are 0 .. (all-ones exponent) - 1, in increasing order
    // of value: a value's index is its bit pattern.
    for (std::uint32_t b = 0; f.IsFinite(static_cast<std::uint16_t>(b)); ++b) {
      values_.push_back(f.Decode(static_cast<std::uint16_t>(b)));
    }
    const double largest = values_.back();
    const double ulp = largest - values_[values_.size() - 2];
    overflow_ = largest + ulp / 2;  // at or past it: infinity (the tie goes to the even "next")
  }
  std::uint16_t operator()(double x) const {
    const bool negative = std::signbit(x);
    const double a = std::fabs(x);
    if (a >= overflow_) return f_.Inf(negative);
    auto it = std::lower_bound(values_.begin(), values_.end(), a);
    std::size_t hi = static_cast<std::size_t>(it - values_.begin());
    std::size_t pick = hi;
    if (hi == values_.size()) {
      pick = hi - 1;
    } else if (hi > 0 && values_[hi] != a) {
      const double down = a - values_[hi - 1], up = values_[hi] - a;
      pick = down < up ? hi - 1 : up < down ? hi : (hi % 2 == 0 ? hi : hi - 1);
    }
    const std::uint16_t sign = negative ? static_cast<std::uint16_t>(1u << (f_.exp_bits + f_.man_bits)) : 0;
    return static_cast<std::uint16_t>(pick | sign);
  }
  const std::vector<double>& values() const { return values_; }

 private:
  Format f_;
  std::vector<double> values_;
  double overflow_;
};

// Floats to test: random bit patterns (every exponent alike), values near the format's values
// and exactly at the midpoints between neighbours, subnormals of both, the extremes.
std::vector<float> TestFloats(const Nearest& nearest, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<float> out;
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    if (!std::isnan(f)) out.push_back(f);
  }
  const std::vector<double>& v = nearest.values();
  std::uniform_int_distribution<std::size_t> pick(0, v.size() - 2);
  for (int i = 0; i < 20000; ++i) {
    const std::size_t k = pick(rng);
    const double mid = (v[k] + v[k + 1]) / 2;  // exact in double, and in float where it fits
    for (double x : {mid, v[k], v[k + 1]}) {
      const float f = static_cast<float>(x);
      if (static_cast<double>(f) == x) {
        out.push_back(f);
        out.push_back(-f);
      }
      out.push_back(std::nextafter(f, 0.0f));
      out.push_back(std::nextafter(f, std::numeric_limits<float>::infinity()));
    }
  }
  for (float f : {0.0f, -0.0f, std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max(), std::numeric_limits<float>::min(),
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), 65504.0f, 65519.99f, 65520.0f,
                  6.0e-8f, 3.0e-8f, 2.9e-8f}) {
    out.push_back(f);
  }
  return out;
}

TEST(WireFormatTest, FloatToBf16RoundsToNearestEvenAsTheReference) {
  const Nearest nearest(kBf16Format);
  std::size_t checked = 0;
  for (float f : TestFloats(nearest, 1)) {
    ASSERT_EQ(ToBf16(f).bits, nearest(f)) << "float " << f << " bits 0x" << std::hex
                                          << std::bit_cast<std::uint32_t>(f);
    ++checked;
  }
  EXPECT_GT(checked, 300000u);
}

TEST(WireFormatTest, FloatToFp16RoundsToNearestEvenAsTheReference) {
  const Nearest nearest(kFp16Format);
  for (float f : TestFloats(nearest, 2)) {
    ASSERT_EQ(ToFp16(f).bits, nearest(f)) << "float " << f << " bits 0x" << std::hex
                                          << std::bit_cast<std::uint32_t>(f);
  }
}

TEST(WireFormatTest, EveryFiniteValueOfBothFormatsWidensExactlyAndComesBack) {
  for (std::uint32_t b = 0; b < 65536; ++b) {
    const auto bits = static_cast<std::uint16_t>(b);
    if (kBf16Format.IsFinite(bits)) {
      const float f = ToFloat(Bf16{bits});
      ASSERT_EQ(static_cast<double>(f), kBf16Format.Decode(bits)) << b;
      ASSERT_EQ(ToBf16(f).bits, bits) << b;
    }
    if (kFp16Format.IsFinite(bits)) {
      const float f = ToFloat(Fp16{bits});
      ASSERT_EQ(static_cast<double>(f), kFp16Format.Decode(bits)) << b;
      ASSERT_EQ(ToFp16(f).bits, bits) << b;
    }
  }
}

TEST(WireFormatTest, NanStaysNanAndInfinityStaysInfinity) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float signalling = std::bit_cast<float>(0x7f800001u);  // would round to inf if not kept
  EXPECT_TRUE(std::isnan(ToFloat(ToBf16(nan))));
  EXPECT_TRUE(std::isnan(ToFloat(ToBf16(signalling))));
  EXPECT_TRUE(std::isnan(ToFloat(ToFp16(nan))));
  EXPECT_EQ(ToFloat(ToBf16(std::numeric_limits<float>::infinity())),
            std::numeric_limits<float>::infinity());
  EXPECT_EQ(ToFloat(ToFp16(-1e6f)), -std::numeric_limits<float>::infinity());
  // Every fp16 pattern with the all-ones exponent widens to float32's infinity or a NaN.
  for (std::uint32_t m = 0; m < 1024; ++m) {
    for (std::uint32_t sign : {0u, 0x8000u}) {
      const float f = ToFloat(Fp16{static_cast<std::uint16_t>(sign | 0x7c00u | m)});
      if (m == 0) {
        EXPECT_EQ(f, sign ? -std::numeric_limits<float>::infinity()
                          : std::numeric_limits<float>::infinity());
      } else {
        EXPECT_TRUE(std::isnan(f)) << m;
      }
    }
  }
}

TEST(WireFormatTest, ArrayConversionsEqualTheScalarOnesAtEveryLength) {
  std::mt19937 rng(3);
  std::normal_distribution<float> g(0.0f, 0.01f);
  for (std::size_t n : {0u, 1u, 7u, 8u, 15u, 16u, 17u, 1000u, 4099u}) {
    std::vector<float> x(n);
    for (float& v : x) v = g(rng);
    std::vector<Bf16> b(n);
    std::vector<Fp16> h(n), hs(n);
    std::vector<float> back_b(n), back_h(n);
    Convert(x, std::span<Bf16>(b));
    Convert(x, std::span<Fp16>(h));
    ConvertScaled(x, 1024.0f, hs);
    Convert(std::span<const Bf16>(b), std::span<float>(back_b));
    Convert(std::span<const Fp16>(h), std::span<float>(back_h));
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(b[i].bits, ToBf16(x[i]).bits) << n << " " << i;
      ASSERT_EQ(h[i].bits, ToFp16(x[i]).bits) << n << " " << i;
      ASSERT_EQ(hs[i].bits, ToFp16(x[i] * 1024.0f).bits) << n << " " << i;
      ASSERT_EQ(back_b[i], ToFloat(b[i]));
      ASSERT_EQ(back_h[i], ToFloat(h[i]));
    }
  }
}

// Error feedback: every call's wire plus its residual is exactly what it was given plus the
// residual before (float32 arithmetic), so over many calls the sum sent stays within one
// rounding of the sum given (float64 reference), where plain rounding drifts by the same
// amount every call.
template <class T>
void CheckFeedbackKeepsTheSum(WireFormat format, double ulp_at_one) {
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 1.0f);
  constexpr int kCalls = 200;
  for (std::size_t n : {1u, 7u, 8u, 17u, 1000u}) {
    std::vector<float> in(n), residual(n, 0.0f), before(n);
    std::vector<T> wire(n);
    std::vector<double> given(n, 0.0), sent(n, 0.0);
    for (int call = 0; call < kCalls; ++call) {
      // A constant bias the format cannot hold (1 + ulp/4) plus noise.
      for (std::size_t i = 0; i < n; ++i) in[i] = 1.0f + float(ulp_at_one / 4) + 0.01f * g(rng);
      before = residual;
      ConvertToWireWithFeedback(format, in, residual, reinterpret_cast<std::byte*>(wire.data()));
      for (std::size_t i = 0; i < n; ++i) {
        const float v = in[i] + before[i];
        ASSERT_EQ(ToFloat(wire[i]) + residual[i], v) << n << " " << i;  // exact
        ASSERT_LE(std::fabs(residual[i]), ulp_at_one) << n << " " << i;
        given[i] += in[i];
        sent[i] += ToFloat(wire[i]);
      }
    }
    for (std::size_t i = 0; i < n; ++i) {
      // |residual| <= ulp, plus float32's rounding of each addition (2^-24 relative).
      EXPECT_LE(std::fabs(sent[i] - given[i]), ulp_at_one + kCalls * 0x1p-23) << n << " " << i;
    }
  }
  // Without feedback the bias is dropped every call: the check above would fail.
  float drift = 0;
  for (int call = 0; call < kCalls; ++call) {
    const float x = 1.0f + float(ulp_at_one / 4);
    T q;
    ConvertToWire(format, std::span(&x, 1), reinterpret_cast<std::byte*>(&q));
    drift += x - ToFloat(q);
  }
  EXPECT_GT(drift, 10 * ulp_at_one);
}

TEST(WireFormatTest, ErrorFeedbackKeepsTheSumOfWhatIsSentBf16) {
  CheckFeedbackKeepsTheSum<Bf16>(WireFormat::kBf16, 0x1p-7);
}
TEST(WireFormatTest, ErrorFeedbackKeepsTheSumOfWhatIsSentFp16) {
  CheckFeedbackKeepsTheSum<Fp16>(WireFormat::kFp16, 0x1p-10);
}

// fp16's range, without loss scaling: values under its smallest subnormal (6e-8) add up in the
// residual until they are sent; a value past 65504 goes as 65504 now and the rest next call,
// never as infinity. NaN stays NaN.
TEST(WireFormatTest, ErrorFeedbackDelaysWhatFp16CannotHoldInsteadOfLosingIt) {
  float tiny = 1e-8f, residual = 0;
  Fp16 q;
  double sent = 0;
  for (int call = 0; call < 1000; ++call) {
    ConvertToWireWithFeedback(WireFormat::kFp16, std::span(&tiny, 1), std::span(&residual, 1),
                              reinterpret_cast<std::byte*>(&q));
    sent += ToFloat(q);
  }
  EXPECT_EQ(ToFloat(ToFp16(tiny)), 0.0f);  // alone it underflows every time
  EXPECT_NEAR(sent, 1000 * 1e-8, 6e-8);

  float huge = 1e5f, zero = 0;
  residual = 0;
  ConvertToWireWithFeedback(WireFormat::kFp16, std::span(&huge, 1), std::span(&residual, 1),
                            reinterpret_cast<std::byte*>(&q));
  EXPECT_EQ(ToFloat(q), 65504.0f);
  double total = ToFloat(q);
  ConvertToWireWithFeedback(WireFormat::kFp16, std::span(&zero, 1), std::span(&residual, 1),
                            reinterpret_cast<std::byte*>(&q));
  total += ToFloat(q);
  EXPECT_NEAR(total + residual, 1e5, 1e-3);
  EXPECT_LE(std::fabs(residual), 16.0f);  // half fp16's spacing at 32768..65504

  float nan = std::numeric_limits<float>::quiet_NaN();
  residual = 0;
  ConvertToWireWithFeedback(WireFormat::kBf16, std::span(&nan, 1), std::span(&residual, 1),
                            reinterpret_cast<std::byte*>(&q));
  EXPECT_TRUE(std::isnan(ToFloat(Bf16{q.bits})));
}

// Compact weights as changes of a view: phubd's view and a worker's copy, updated by
// ConvertChangeToWire and AddFromWire, stay bit-identical; in place equals out of place; and
// over a random walk of small steps the view stays within one rounding of one change of the
// target (float64), where the weights rounded to the format would be off by far more.
template <class T>
void CheckChangesTrackTheTarget(WireFormat format, double half_ulp) {
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (std::size_t n : {1u, 9u, 1000u}) {
    std::vector<float> target(n), view(n), in_place(n), worker(n);
    std::vector<T> wire(n), wire2(n);
    for (std::size_t i = 0; i < n; ++i) target[i] = view[i] = in_place[i] = worker[i] = g(rng);
    double worst = 0, worst_rounded = 0;
    for (int step = 0; step < 100; ++step) {
      std::vector<float> before = view, d(n);
      for (std::size_t i = 0; i < n; ++i) {
        d[i] = 1e-3f * g(rng);
        target[i] += d[i];
      }
      ConvertChangeToWire(format, target, before, view, reinterpret_cast<std::byte*>(wire.data()));
      ConvertChangeToWire(format, target, in_place, in_place,
                          reinterpret_cast<std::byte*>(wire2.data()));
      AddFromWire(format, reinterpret_cast<const std::byte*>(wire.data()), worker);
      ASSERT_EQ(view, in_place) << n << " " << step;
      ASSERT_EQ(view, worker) << n << " " << step;
      for (std::size_t i = 0; i < n; ++i) {
        const double off = std::fabs(double{view[i]} - target[i]);
        ASSERT_LE(off, half_ulp * std::fabs(double{target[i]} - before[i]) + 1e-7) << n << " " << i;
        worst = std::max(worst, off);
        T rounded;
        ConvertToWire(format, std::span(&target[i], 1), reinterpret_cast<std::byte*>(&rounded));
        worst_rounded = std::max(worst_rounded, std::fabs(double{ToFloat(rounded)} - target[i]));
      }
    }
    if (n == 1000) EXPECT_LT(10 * worst, worst_rounded);
  }
}

TEST(WireFormatTest, ChangesKeepTheViewWithinOneRoundingOfOneChangeBf16) {
  CheckChangesTrackTheTarget<Bf16>(WireFormat::kBf16, 0x1p-8);
}
TEST(WireFormatTest, ChangesKeepTheViewWithinOneRoundingOfOneChangeFp16) {
  CheckChangesTrackTheTarget<Fp16>(WireFormat::kFp16, 0x1p-11);
}

// The feedback and change kernels (vectorized where the CPU allows, wire_format.cc) equal their
// one-element definitions, written out here with the scalar ToBf16/ToFp16, bit for bit on the
// edge cases TestFloats gives (ties, subnormals, past the limit, infinities) and on NaN (wire
// and residual NaN alike), at every offset within a vector and for the tail behind it. For
// the changes also in place (view_in == view_out).
template <class T>
void CheckKernelsEqualTheirDefinitions(WireFormat format, const Format& f, float limit,
                                       T (*narrow)(float)) {
  const Nearest nearest(f);
  std::vector<float> pool = TestFloats(nearest, 23);
  pool.push_back(std::numeric_limits<float>::quiet_NaN());
  pool.push_back(-std::numeric_limits<float>::quiet_NaN());
  pool.push_back(std::bit_cast<float>(0x7f800001u));  // a signalling NaN
  std::mt19937 rng(29);
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1);
  std::normal_distribution<float> small(0.0f, 1e-3f);
  const auto same = [](float a, float b) {
    return (std::isnan(a) && std::isnan(b)) ||
           std::bit_cast<std::uint32_t>(a) == std::bit_cast<std::uint32_t>(b);
  };
  const auto widen = [](T q) { return ToFloat(q); };
  for (std::size_t n : {0u, 1u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 1000u, 4099u}) {
    for (int round = 0; round < 20; ++round) {
      std::vector<float> in(n), residual(n), target(n), view(n);
      for (std::size_t i = 0; i < n; ++i) {
        in[i] = pool[pick(rng)];
        residual[i] = i % 3 == 0 ? 0.0f : (i % 3 == 1 ? small(rng) : pool[pick(rng)]);
        target[i] = pool[pick(rng)];
        view[i] = i % 2 ? pool[pick(rng)] : small(rng);
      }
      std::vector<T> wire(n), wire_change(n), wire_in_place(n);
      std::vector<float> got_residual = residual, got_view(n), in_place = view;
      ConvertToWireWithFeedback(format, in, got_residual,
                                reinterpret_cast<std::byte*>(wire.data()));
      ConvertChangeToWire(format, target, view, got_view,
                          reinterpret_cast<std::byte*>(wire_change.data()));
      ConvertChangeToWire(format, target, in_place, in_place,
                          reinterpret_cast<std::byte*>(wire_in_place.data()));
      for (std::size_t i = 0; i < n; ++i) {
        const auto clamp = [limit](float x) {
          return x > limit ? limit : (x < -limit ? -limit : x);
        };
        const float v = in[i] + residual[i];
        const T q = narrow(clamp(v));
        ASSERT_TRUE(same(widen(wire[i]), widen(q)) &&
                    (std::isnan(widen(q)) || wire[i].bits == q.bits))
            << "feedback n " << n << " i " << i << " v " << v;
        ASSERT_TRUE(same(got_residual[i], v - widen(q))) << "feedback n " << n << " i " << i;
        const float d = target[i] - view[i];
        const T c = narrow(clamp(d));
        ASSERT_TRUE(same(widen(wire_change[i]), widen(c)) &&
                    (std::isnan(widen(c)) || wire_change[i].bits == c.bits))
            << "change n " << n << " i " << i << " d " << d;
        ASSERT_TRUE(same(got_view[i], view[i] + widen(c))) << "change n " << n << " i " << i;
        ASSERT_TRUE(same(in_place[i], got_view[i])) << "in place n " << n << " i " << i;
        ASSERT_EQ(wire_in_place[i].bits, wire_change[i].bits) << "in place n " << n << " i " << i;
      }
    }
  }
}

TEST(WireFormatTest, FeedbackAndChangeKernelsEqualTheirDefinitionsBf16) {
  CheckKernelsEqualTheirDefinitions<Bf16>(WireFormat::kBf16, kBf16Format,
                                          std::bit_cast<float>(0x7f7f0000u), &ToBf16);
}
TEST(WireFormatTest, FeedbackAndChangeKernelsEqualTheirDefinitionsFp16) {
  CheckKernelsEqualTheirDefinitions<Fp16>(WireFormat::kFp16, kFp16Format, 65504.0f, &ToFp16);
}

TEST(WireFormatTest, NamesParseAndUnknownOnesAreRefusedListingTheKnown) {
  for (WireFormat f : {WireFormat::kFp32, WireFormat::kBf16, WireFormat::kFp16}) {
    auto parsed = ParseWireFormat(WireFormatName(f));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, f);
  }
  EXPECT_EQ(WireBytes(WireFormat::kFp32), 4u);
  EXPECT_EQ(WireBytes(WireFormat::kBf16), 2u);
  auto bad = ParseWireFormat("int8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("fp32, bf16 or fp16"), std::string::npos);
}

// AggregateAndStep over compact inputs computes what the float kernel computes on the widened
// values, bit for bit, for every optimizer, N on both paths (<= 4 in registers, > 4 blocked),
// lengths around the vector width and the block, in place and out of place; and stays within
// float rounding of a float64 loop.
template <class T>
void CheckCompactInputs(std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  for (OptimizerKind kind : {OptimizerKind::kSgd, OptimizerKind::kMomentum,
                             OptimizerKind::kNesterov, OptimizerKind::kAdam,
                             OptimizerKind::kAverage}) {
    for (std::size_t n_in : {1u, 2u, 4u, 5u, 8u, 9u}) {
      for (std::size_t len : {1u, 13u, 2048u, 5000u}) {
        OptimizerConfig config;
        config.kind = kind;
        config.lr = 0.05f;
        config.weight_decay = kind == OptimizerKind::kAverage ? 0.0f : 1e-3f;
        std::vector<std::vector<T>> compact(n_in, std::vector<T>(len));
        std::vector<std::vector<float>> widened(n_in, std::vector<float>(len));
        for (std::size_t w = 0; w < n_in; ++w) {
          for (std::size_t i = 0; i < len; ++i) {
            if constexpr (std::is_same_v<T, Bf16>) {
              compact[w][i] = ToBf16(g(rng));
            } else {
              compact[w][i] = ToFp16(g(rng));
            }
            widened[w][i] = ToFloat(compact[w][i]);
          }
        }
        std::vector<float> w0(len);
        for (float& x : w0) x = g(rng);
        std::vector<const T*> cin;
        std::vector<const float*> fin;
        for (std::size_t w = 0; w < n_in; ++w) {
          cin.push_back(compact[w].data());
          fin.push_back(widened[w].data());
        }
        const int n_state = StateArrays(kind);
        std::vector<std::vector<float>> cs(2, std::vector<float>(len, 0.0f)), fs = cs, os = cs;
        std::vector<float*> cst{cs[0].data(), cs[1].data()}, fst{fs[0].data(), fs[1].data()},
            ost{os[0].data(), os[1].data()};
        std::vector<float> cw = w0, fw = w0, ow(len);
        for (std::uint64_t step = 1; step <= 2; ++step) {
          AggregateAndStep(std::span<const T* const>(cin), std::span<float>(cw),
                           std::span<float* const>(cst.data(), n_state), config, step);
          AggregateAndStep(std::span<const float* const>(fin), std::span<float>(fw),
                           std::span<float* const>(fst.data(), n_state), config, step);
        }
        ASSERT_EQ(cw, fw) << "kind " << OptimizerName(kind) << " N " << n_in << " len " << len;
        // Out of place, one step from w0: the same as in place.
        std::vector<float> iw = w0;
        std::vector<std::vector<float>> is(2, std::vector<float>(len, 0.0f));
        std::vector<float*> ist{is[0].data(), is[1].data()};
        AggregateAndStep(std::span<const T* const>(cin), std::span<const float>(w0),
                         std::span<float>(ow), std::span<float* const>(ost.data(), n_state),
                         config, 1);
        AggregateAndStep(std::span<const T* const>(cin), std::span<float>(iw),
                         std::span<float* const>(ist.data(), n_state), config, 1);
        ASSERT_EQ(ow, iw) << "out of place, kind " << OptimizerName(kind) << " N " << n_in;
        // Summation mode against float64: the mean of the widened copies.
        if (kind == OptimizerKind::kAverage) {
          for (std::size_t i = 0; i < len; ++i) {
            double sum = 0;
            for (std::size_t w = 0; w < n_in; ++w) sum += widened[w][i];
            const double mean = sum / static_cast<double>(n_in);
            ASSERT_NEAR(cw[i], mean, 1e-5 * (1 + std::fabs(mean))) << i;
          }
        }
      }
    }
  }
}

TEST(WireFormatTest, AggregatingBf16InputsEqualsAggregatingTheirFloatValues) {
  CheckCompactInputs<Bf16>(4);
}
TEST(WireFormatTest, AggregatingFp16InputsEqualsAggregatingTheirFloatValues) {
  CheckCompactInputs<Fp16>(5);
}

}  // namespace
}  // namespace phub::kernels
