// An independent float64 reference of PHub's optimizers, written from the formulas (not from
// phub/kernels/), for checking the float32 kernels and the whole PS end to end.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace phub::testing {

enum class RefOptimizer { kSgd, kMomentum, kNesterov, kAdam };

struct RefConfig {
  RefOptimizer kind = RefOptimizer::kSgd;
  double lr = 0.01, momentum = 0.9, weight_decay = 0.0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// One synchronous step on one tensor: `grads[w]` is worker w's gradient; `step` counts from 1.
// `v` and `s` are the optimizer's state (resized on first use).
inline void RefStep(const RefConfig& c, const std::vector<std::vector<double>>& grads,
                    std::vector<double>& weights, std::vector<double>& v, std::vector<double>& s,
                    std::uint64_t step) {
  const std::size_t n = weights.size();
  v.resize(n, 0.0);
  s.resize(n, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    double g = 0;
    for (const auto& worker : grads) g += worker[i];
    g = g / static_cast<double>(grads.size()) + c.weight_decay * weights[i];
    switch (c.kind) {
      case RefOptimizer::kSgd:
        weights[i] -= c.lr * g;
        break;
      case RefOptimizer::kMomentum:
        v[i] = c.momentum * v[i] + g;
        weights[i] -= c.lr * v[i];
        break;
      case RefOptimizer::kNesterov:
        v[i] = c.momentum * v[i] + g;
        weights[i] -= c.lr * (g + c.momentum * v[i]);
        break;
      case RefOptimizer::kAdam: {
        v[i] = c.beta1 * v[i] + (1 - c.beta1) * g;
        s[i] = c.beta2 * s[i] + (1 - c.beta2) * g * g;
        double m_hat = v[i] / (1 - std::pow(c.beta1, static_cast<double>(step)));
        double s_hat = s[i] / (1 - std::pow(c.beta2, static_cast<double>(step)));
        weights[i] -= c.lr * m_hat / (std::sqrt(s_hat) + c.eps);
        break;
      }
    }
  }
}

}  // namespace phub::testing
