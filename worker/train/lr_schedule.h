// The learning rate of every step of a run: phub-worker's --lr-schedule, --warmup-iters and
// the parameters of each schedule. Step s counts from 0; η = --lr, W = --warmup-iters,
// F = --warmup-start-factor, T = the run's steps (--epochs x batches, or --warmup + --iters):
//
//   s < W (warm-up)     η · (F + (1 − F) · s / W)
//   s ≥ W, t = s − W:
//     constant          η
//     step              η · γ^⌊t / S⌋                                  S = --lr-step-every,
//                                                                      γ = --lr-gamma
//     cosine            η_min + (η − η_min) · (1 + cos(π · t / (T − W))) / 2    η_min = --lr-min
//
// These are, step for step, the closed forms of torch.optim.lr_scheduler's
//
//   warm = LinearLR(opt, start_factor=F, end_factor=1.0, total_iters=W)
//   main = StepLR(opt, step_size=S, gamma=γ)                      # step
//        | CosineAnnealingLR(opt, T_max=T - W, eta_min=η_min)     # cosine
//   sched = SequentialLR(opt, [warm, main], milestones=[W])       # W = 0: main alone;
//                                                                 # constant: warm alone
//
// with sched.step() after every optimizer.step() (per iteration, not per epoch): the
// composition torchvision's classification reference uses (references/classification/
// train.py, --lr-warmup-method linear, whose --lr-warmup-decay default 0.01 is F's). Torch's
// LinearLR refuses F = 0, and so does this; only the cosine's end (η_min = 0) reaches lr 0.
// Cosine is defined over the run (s < T): at s = T it would reach η_min, past it torch's
// rises again.
//
// Only the learning rate follows the schedule; the optimizer's other values stay the flags'.
// Thread-safety: immutable once made.
#pragma once

#include <cstdint>
#include <string>

#include "phub/common/status.h"
#include "phub/kernels/optimizer_config.h"

namespace phub::worker {

enum class LrScheduleKind { kConstant, kStep, kCosine };

// "constant", "step", "cosine"; InvalidArgument naming them otherwise.
StatusOr<LrScheduleKind> ParseLrScheduleKind(const std::string& name);
const char* LrScheduleName(LrScheduleKind kind);

// phub-worker's flags, as given (worker/phub_worker_flags.h declares them).
struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  std::int64_t warmup_iters = 0;      // W
  double warmup_start_factor = 0.01;  // F
  std::int64_t step_every = 0;        // S (step; 0: not given)
  double gamma = 0.1;                 // γ (step; torch's StepLR default)
  double lr_min = 0.0;                // η_min (cosine; torch's default)

  // Whether the learning rate changes during the run (anything but constant without a
  // warm-up): only then is the exchange told each iteration's values.
  bool Varies() const { return kind != LrScheduleKind::kConstant || warmup_iters > 0; }
};

class LrSchedule {
 public:
  // `base_lr`: η (the optimizer's --lr); `total_steps`: T. InvalidArgument naming the flag and
  // the fix: step without --lr-step-every, F outside (0, 1], γ <= 0, η_min outside [0, η],
  // a cosine with no step left after the warm-up (W >= T).
  static StatusOr<LrSchedule> Create(const LrScheduleOptions& options, double base_lr,
                                     std::int64_t total_steps);

  // The learning rate of 0-based step `step` (REQUIRES: 0 <= step), in float64.
  double LrAt(std::int64_t step) const;
  // `base` (the optimizer's flags) with lr = LrAt(step), rounded to float.
  kernels::StepValues ValuesAt(std::int64_t step, const kernels::StepValues& base) const;
  bool Varies() const { return options_.Varies(); }
  // One line for the log, e.g. "cosine from 0.1 to 0 over 950 steps after a warm-up of 50
  // steps from 0.001".
  std::string Describe() const;

 private:
  LrSchedule(const LrScheduleOptions& options, double base_lr, std::int64_t total_steps)
      : options_(options), base_lr_(base_lr), total_steps_(total_steps) {}

  LrScheduleOptions options_;
  double base_lr_;
  std::int64_t total_steps_;
};

}  // namespace phub::worker
