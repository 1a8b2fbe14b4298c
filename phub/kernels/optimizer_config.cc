// Names, descriptions and validation of OptimizerConfig. Validation happens once, at the edge
// (when a job's configuration is read), so the kernel itself never checks hyper-parameters.
#include <array>
#include <cmath>
#include <string>
#include <string_view>

#include "fmt/format.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/kernels/optimizer_update.h"

namespace phub::kernels {
namespace {

struct NamedKind {
  std::string_view name;
  OptimizerKind kind;
};

// The one table of names: Parse, Name and the error message all read it.
constexpr std::array<NamedKind, 5> kKinds = {{
    {"sgd", OptimizerKind::kSgd},
    {"momentum", OptimizerKind::kMomentum},
    {"nesterov", OptimizerKind::kNesterov},
    {"adam", OptimizerKind::kAdam},
    {"average", OptimizerKind::kAverage},
}};

std::string AcceptedNames() {
  std::string out;
  for (const auto& k : kKinds) {
    if (!out.empty()) out += ", ";
    out += k.name;
  }
  return out;
}

bool IsKnown(OptimizerKind kind) {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return true;
  }
  return false;
}

// True when 0 <= v < 1 (rejects NaN).
bool InUnitInterval(float v) { return v >= 0.0f && v < 1.0f; }

}  // namespace

int StateArrays(OptimizerKind kind) {
  // Counted from what the update itself reads (optimizer_update.h): one list of kinds.
  return (UsesFirstState(kind) ? 1 : 0) + (UsesSecondState(kind) ? 1 : 0);
}

StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name) {
  for (const auto& k : kKinds) {
    if (k.name == name) return k.kind;
  }
  return absl::InvalidArgumentError(
      fmt::format("unknown optimizer '{}': accepted names are {}", name, AcceptedNames()));
}

std::string OptimizerName(OptimizerKind kind) {
  for (const auto& k : kKinds) {
    if (k.kind == kind) return std::string(k.name);
  }
  return fmt::format("unknown({})", static_cast<int>(kind));
}

std::string Describe(const OptimizerConfig& c) {
  // {} prints the shortest representation that reads back to the same float.
  switch (c.kind) {
    case OptimizerKind::kSgd:
      return fmt::format("sgd(lr={}, weight_decay={})", c.lr, c.weight_decay);
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
      return fmt::format("{}(lr={}, momentum={}, weight_decay={})", OptimizerName(c.kind), c.lr,
                         c.momentum, c.weight_decay);
    case OptimizerKind::kAdam:
      return fmt::format("adam(lr={}, beta1={}, beta2={}, eps={}, weight_decay={})", c.lr, c.beta1,
                         c.beta2, c.eps, c.weight_decay);
    case OptimizerKind::kAverage:
      return "average(the workers' mean gradient, no optimizer)";
  }
  return OptimizerName(c.kind);
}

namespace {

Status CheckConfig(const OptimizerConfig& c, bool lr_may_be_zero) {
  if (!IsKnown(c.kind)) {
    return absl::InvalidArgumentError(fmt::format("optimizer kind {} is not known: use one of {}",
                                                  static_cast<int>(c.kind), AcceptedNames()));
  }
  const std::string where = OptimizerName(c.kind);
  if (c.kind == OptimizerKind::kAverage) {
    // lr and the others are not used; a weight decay here would be applied twice or never.
    if (c.weight_decay != 0.0f) {
      return absl::InvalidArgumentError(fmt::format(
          "average: weight_decay={} is invalid: phubd only averages gradients in this mode; "
          "give the weight decay to the workers' optimizer and 0 here",
          c.weight_decay));
    }
    return absl::OkStatus();
  }
  if (!(c.lr > 0.0f || (lr_may_be_zero && c.lr == 0.0f)) || !std::isfinite(c.lr)) {
    return absl::InvalidArgumentError(
        fmt::format("{}: lr={} is invalid: the learning rate must be finite and {}", where, c.lr,
                    lr_may_be_zero ? ">= 0" : "> 0"));
  }
  if (!(c.weight_decay >= 0.0f) || !std::isfinite(c.weight_decay)) {
    return absl::InvalidArgumentError(
        fmt::format("{}: weight_decay={} is invalid: it must be finite and >= 0 (0 turns it off)",
                    where, c.weight_decay));
  }
  if (c.kind == OptimizerKind::kMomentum || c.kind == OptimizerKind::kNesterov) {
    if (!InUnitInterval(c.momentum)) {
      return absl::InvalidArgumentError(fmt::format(
          "{}: momentum={} is invalid: it must be in [0, 1) (0.9 is usual)", where, c.momentum));
    }
  }
  if (c.kind == OptimizerKind::kAdam) {
    if (!InUnitInterval(c.beta1)) {
      return absl::InvalidArgumentError(
          fmt::format("adam: beta1={} is invalid: it must be in [0, 1) (0.9 is usual)", c.beta1));
    }
    if (!InUnitInterval(c.beta2)) {
      return absl::InvalidArgumentError(
          fmt::format("adam: beta2={} is invalid: it must be in [0, 1) (0.999 is usual)", c.beta2));
    }
    if (!(c.eps > 0.0f) || !std::isfinite(c.eps)) {
      return absl::InvalidArgumentError(
          fmt::format("adam: eps={} is invalid: it must be finite and > 0 (1e-8 is usual)", c.eps));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status Validate(const OptimizerConfig& c) { return CheckConfig(c, /*lr_may_be_zero=*/false); }

Status ValidateStepValues(OptimizerKind kind, const StepValues& values) {
  return CheckConfig(WithValues(OptimizerConfig{.kind = kind}, values), /*lr_may_be_zero=*/true);
}

std::string Describe(OptimizerKind kind, const StepValues& v) {
  switch (kind) {
    case OptimizerKind::kSgd:
      return fmt::format("lr={}, weight_decay={}", v.lr, v.weight_decay);
    case OptimizerKind::kMomentum:
    case OptimizerKind::kNesterov:
      return fmt::format("lr={}, momentum={}, weight_decay={}", v.lr, v.momentum, v.weight_decay);
    case OptimizerKind::kAdam:
      return fmt::format("lr={}, beta1={}, beta2={}, eps={}, weight_decay={}", v.lr, v.beta1,
                         v.beta2, v.eps, v.weight_decay);
    case OptimizerKind::kAverage:
      return "no values (average)";
  }
  return OptimizerName(kind);
}

}  // namespace phub::kernels
