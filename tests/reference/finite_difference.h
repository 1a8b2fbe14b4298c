// Gradient checking for the backward ops: a central-difference gradient of a scalar function of
// a vector (run it on the float64 references of nn_reference.h, not on a float32 backend, whose
// rounding would swamp the difference), a comparison that reports the worst element as a gtest
// AssertionResult, and a seeded random vector.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <span>
#include <type_traits>
#include <vector>

namespace phub::reference {

// g_i = (f(x + h e_i) - f(x - h e_i)) / (2h), error O(h^2). Divides by the step actually taken
// ((x_i + h) - (x_i - h) as rounded), not by 2h, so the rounding of x_i +- h does not become a
// relative error in g_i. The default h suits a double f of O(1) inputs: truncation ~h^2 = 1e-12,
// cancellation ~1e-16 / h = 1e-10.
inline std::vector<double> CentralDifferenceGradient(
    const std::function<double(const std::vector<double>&)>& f, std::vector<double> x,
    double h = 1e-6) {
  std::vector<double> g(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    const double plus = xi + h, minus = xi - h;
    x[i] = plus;
    const double f_plus = f(x);
    x[i] = minus;
    const double f_minus = f(x);
    x[i] = xi;
    g[i] = (f_plus - f_minus) / (plus - minus);
  }
  return g;
}

namespace detail {

template <class A>
::testing::AssertionResult GradientsNearImpl(std::span<const A> analytic,
                                             std::span<const double> numeric, double abs_tol,
                                             double rel_tol) {
  static_assert(std::is_floating_point_v<A>);
  if (analytic.size() != numeric.size()) {
    return ::testing::AssertionFailure() << "gradient sizes differ: analytic " << analytic.size()
                                         << ", numeric " << numeric.size();
  }
  // Worst = the failing element with the largest error relative to its own tolerance; a NaN on
  // either side fails ("err <= tol" is false) and ranks as infinitely bad.
  std::size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  for (std::size_t i = 0; i < numeric.size(); ++i) {
    const double a = static_cast<double>(analytic[i]), n = numeric[i];
    const double err = std::abs(a - n), tol = abs_tol + rel_tol * std::abs(n);
    if (err <= tol) continue;
    ++bad;
    const double ratio =
        std::isnan(err) || tol <= 0 ? std::numeric_limits<double>::infinity() : err / tol;
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  const double a = static_cast<double>(analytic[worst]), n = numeric[worst];
  const double err = std::abs(a - n);
  return ::testing::AssertionFailure()
         << bad << " of " << numeric.size() << " gradient elements off; worst at index " << worst
         << ": analytic " << a << ", numeric " << n << ", abs err " << err << ", rel err "
         << (n != 0 ? err / std::abs(n) : std::numeric_limits<double>::infinity())
         << " (tolerance " << abs_tol << " + " << rel_tol << " * |numeric| = "
         << abs_tol + rel_tol * std::abs(n) << ")";
}

}  // namespace detail

// Passes when |analytic_i - numeric_i| <= abs_tol + rel_tol * |numeric_i| for every i; otherwise
// fails naming the worst element. Use as EXPECT_TRUE(GradientsNear(dx, numeric, 1e-4, 1e-3)).
// Takes spans so that a vector<float>, a vector<double> or a host Tensor's span() all fit.
inline ::testing::AssertionResult GradientsNear(std::span<const float> analytic,
                                                std::span<const double> numeric, double abs_tol,
                                                double rel_tol) {
  return detail::GradientsNearImpl<float>(analytic, numeric, abs_tol, rel_tol);
}
inline ::testing::AssertionResult GradientsNear(std::span<const double> analytic,
                                                std::span<const double> numeric, double abs_tol,
                                                double rel_tol) {
  return detail::GradientsNearImpl<double>(analytic, numeric, abs_tol, rel_tol);
}

// n values uniform in [lo, hi), reproducible from `seed` (within one standard library:
// uniform_real_distribution's algorithm is implementation-defined).
inline std::vector<double> RandomVector(std::size_t n, std::uint64_t seed, double lo = -1.0,
                                        double hi = 1.0) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

}  // namespace phub::reference
