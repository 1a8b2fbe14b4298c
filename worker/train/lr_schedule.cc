#include "worker/train/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace phub::worker {

StatusOr<LrScheduleKind> ParseLrScheduleKind(const std::string& name) {
  if (name == "constant") return LrScheduleKind::kConstant;
  if (name == "step") return LrScheduleKind::kStep;
  if (name == "cosine") return LrScheduleKind::kCosine;
  return absl::InvalidArgumentError(
      absl::StrCat("--lr-schedule '", name, "' is not known: use constant, step or cosine"));
}

const char* LrScheduleName(LrScheduleKind kind) {
  switch (kind) {
    case LrScheduleKind::kConstant:
      return "constant";
    case LrScheduleKind::kStep:
      return "step";
    case LrScheduleKind::kCosine:
      return "cosine";
  }
  return "unknown";
}

StatusOr<LrSchedule> LrSchedule::Create(const LrScheduleOptions& o, double base_lr,
                                        std::int64_t total_steps) {
  if (o.warmup_iters < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--warmup-iters ", o.warmup_iters,
                                                   " is negative: give 0 (no warm-up) or more"));
  }
  if (!(o.warmup_start_factor > 0 && o.warmup_start_factor <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--warmup-start-factor ", o.warmup_start_factor,
        " is outside (0, 1]: the warm-up starts at this fraction of --lr (torch's LinearLR "
        "takes the same range; 0.01 is usual)"));
  }
  if (o.kind == LrScheduleKind::kStep) {
    if (o.step_every <= 0) {
      return absl::InvalidArgumentError(
          "--lr-schedule step needs --lr-step-every N (> 0): the steps between two decays by "
          "--lr-gamma");
    }
    if (!(o.gamma > 0) || !std::isfinite(o.gamma)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lr-gamma ", o.gamma, " is invalid: it must be finite and > 0 (0.1 is usual)"));
    }
  }
  if (o.kind == LrScheduleKind::kCosine) {
    if (!(o.lr_min >= 0 && o.lr_min <= base_lr)) {
      return absl::InvalidArgumentError(absl::StrCat("--lr-min ", o.lr_min, " is outside [0, --lr ",
                                                     base_lr,
                                                     "]: the cosine decays from --lr down to it"));
    }
    if (o.warmup_iters >= total_steps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--lr-schedule cosine decays over the steps after the warm-up, and --warmup-iters ",
          o.warmup_iters, " leaves none of the run's ", total_steps,
          ": give fewer --warmup-iters or more --iters/--epochs"));
    }
  }
  return LrSchedule(o, base_lr, total_steps);
}

double LrSchedule::LrAt(std::int64_t step) const {
  const double lr = base_lr_;
  const auto s = static_cast<double>(step);
  const auto w = static_cast<double>(options_.warmup_iters);
  if (step < options_.warmup_iters) {
    const double f = options_.warmup_start_factor;
    return lr * (f + (1 - f) * s / w);
  }
  const double t = s - w;
  switch (options_.kind) {
    case LrScheduleKind::kConstant:
      return lr;
    case LrScheduleKind::kStep:
      return lr *
             std::pow(options_.gamma, std::floor(t / static_cast<double>(options_.step_every)));
    case LrScheduleKind::kCosine: {
      const double period = static_cast<double>(total_steps_) - w;
      const double lr_min = options_.lr_min;
      return lr_min + (lr - lr_min) * (1 + std::cos(std::numbers::pi * t / period)) / 2;
    }
  }
  return lr;
}

kernels::StepValues LrSchedule::ValuesAt(std::int64_t step, const kernels::StepValues& base) const {
  kernels::StepValues values = base;
  values.lr = static_cast<float>(LrAt(step));
  return values;
}

std::string LrSchedule::Describe() const {
  const auto& o = options_;
  std::string main;
  switch (o.kind) {
    case LrScheduleKind::kConstant:
      main = absl::StrCat("constant ", base_lr_);
      break;
    case LrScheduleKind::kStep:
      main =
          absl::StrCat("step from ", base_lr_, ", x", o.gamma, " every ", o.step_every, " steps");
      break;
    case LrScheduleKind::kCosine:
      main = absl::StrCat("cosine from ", base_lr_, " to ", o.lr_min, " over ",
                          total_steps_ - o.warmup_iters, " steps");
      break;
  }
  if (o.warmup_iters == 0) return main;
  return absl::StrCat(main, " after a linear warm-up of ", o.warmup_iters, " steps from ",
                      base_lr_ * o.warmup_start_factor);
}

}  // namespace phub::worker
