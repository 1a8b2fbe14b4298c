// The learning-rate schedules (worker/train/lr_schedule.h) against torch's schedulers stepped
// one iteration at a time: a float64 re-enactment of torch.optim.lr_scheduler's recursive
// ("chainable") forms — LinearLR, StepLR, CosineAnnealingLR and SequentialLR's hand-over at
// the milestone — not the closed forms LrSchedule computes, so the two agree only if the
// closed forms are the composition the header names. Then each flag's refusal names the flag.
#include "worker/train/lr_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <vector>

#include "tests/worker/status_testing.h"

namespace phub::worker {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

// torch: warm = LinearLR(start_factor=F, end_factor=1, total_iters=W); main = StepLR or
// CosineAnnealingLR(T_max=T-W); SequentialLR([warm, main], milestones=[W]) (W = 0: main
// alone; constant: warm alone); the lr of each of `steps` iterations, sched.step() after each.
std::vector<double> TorchLrs(const LrScheduleOptions& o, double base, std::int64_t steps) {
  const std::int64_t w = o.warmup_iters;
  const double f = o.warmup_start_factor;
  const double t_max = static_cast<double>(steps - w);
  // LinearLR's first lr is base * F (its _initial_step); main's first is base.
  double lr = w > 0 ? base * f : base;
  std::int64_t main_epoch = 0;  // main's last_epoch
  std::vector<double> lrs;
  auto main_step = [&] {  // main.step(): its get_lr from the group's lr
    ++main_epoch;
    const auto t = static_cast<double>(main_epoch);
    switch (o.kind) {
      case LrScheduleKind::kConstant:
        break;
      case LrScheduleKind::kStep:
        if (main_epoch % o.step_every == 0) lr *= o.gamma;
        break;
      case LrScheduleKind::kCosine:
        lr = (1 + std::cos(std::numbers::pi * t / t_max)) /
                 (1 + std::cos(std::numbers::pi * (t - 1) / t_max)) * (lr - o.lr_min) +
             o.lr_min;
        break;
    }
  };
  for (std::int64_t s = 0; s < steps; ++s) {
    lrs.push_back(lr);
    const std::int64_t epoch = s + 1;  // SequentialLR's last_epoch after this step()
    if (w == 0) {
      main_step();
    } else if (epoch < w || (o.kind == LrScheduleKind::kConstant && epoch <= w)) {
      // LinearLR.get_lr, end_factor 1 (the last of it lands on base exactly in reals).
      lr *= 1.0 +
            (1.0 - f) / (static_cast<double>(w) * f + static_cast<double>(epoch - 1) * (1.0 - f));
    } else if (o.kind == LrScheduleKind::kConstant) {
      // LinearLR past total_iters: the group's lr as it is.
    } else if (epoch == w) {
      // The milestone: SequentialLR calls main.step(0), main's closed form at epoch 0: base.
      main_epoch = 0;
      lr = base;
    } else {
      main_step();
    }
  }
  return lrs;
}

void ExpectLikeTorch(const LrScheduleOptions& o, double base, std::int64_t steps) {
  const LrSchedule schedule = testing::ValueOrDie(LrSchedule::Create(o, base, steps));
  const std::vector<double> want = TorchLrs(o, base, steps);
  for (std::int64_t s = 0; s < steps; ++s) {
    const double got = schedule.LrAt(s);
    EXPECT_NEAR(got, want[static_cast<std::size_t>(s)], 1e-12 * base)
        << LrScheduleName(o.kind) << " step " << s;
  }
}

TEST(LrScheduleTest, ConstantWithAWarmUpIsTorchsLinearLr) {
  ExpectLikeTorch({.kind = LrScheduleKind::kConstant, .warmup_iters = 10}, 0.1, 60);
  ExpectLikeTorch(
      {.kind = LrScheduleKind::kConstant, .warmup_iters = 7, .warmup_start_factor = 0.25}, 0.05,
      55);
}

TEST(LrScheduleTest, StepWithAWarmUpIsTorchsLinearThenStepLr) {
  ExpectLikeTorch({.kind = LrScheduleKind::kStep, .warmup_iters = 5, .step_every = 7, .gamma = 0.5},
                  0.1, 60);
  ExpectLikeTorch({.kind = LrScheduleKind::kStep,
                   .warmup_iters = 12,
                   .warmup_start_factor = 0.1,
                   .step_every = 10,
                   .gamma = 0.1},
                  0.4, 80);
}

TEST(LrScheduleTest, CosineWithAWarmUpIsTorchsLinearThenCosineAnnealingLr) {
  ExpectLikeTorch({.kind = LrScheduleKind::kCosine, .warmup_iters = 8, .lr_min = 0.001}, 0.1, 64);
  ExpectLikeTorch({.kind = LrScheduleKind::kCosine, .warmup_iters = 1, .lr_min = 0.0}, 0.02, 51);
}

TEST(LrScheduleTest, WithoutAWarmUpTheMainScheduleRunsAlone) {
  ExpectLikeTorch({.kind = LrScheduleKind::kStep, .step_every = 4, .gamma = 0.7}, 0.1, 50);
  ExpectLikeTorch({.kind = LrScheduleKind::kCosine}, 0.1, 50);
  ExpectLikeTorch({.kind = LrScheduleKind::kConstant}, 0.1, 50);
}

TEST(LrScheduleTest, TheCosineEndsTheRunJustAboveLrMin) {
  constexpr std::int64_t kSteps = 100;
  const LrSchedule s = testing::ValueOrDie(LrSchedule::Create(
      {.kind = LrScheduleKind::kCosine, .warmup_iters = 10, .lr_min = 0.0}, 0.1, kSteps));
  EXPECT_DOUBLE_EQ(s.LrAt(10), 0.1);  // the warm-up ends on --lr
  const double last = s.LrAt(kSteps - 1);
  EXPECT_GT(last, 0.0);
  EXPECT_LT(last, 0.1 * 1e-3);  // (1 + cos(pi * 89/90)) / 2 of it
}

TEST(LrScheduleTest, ValuesAtChangesTheLrAloneRoundedToFloat) {
  const LrSchedule s = testing::ValueOrDie(LrSchedule::Create(
      {.kind = LrScheduleKind::kStep, .warmup_iters = 3, .step_every = 2, .gamma = 0.3}, 0.1, 20));
  const kernels::StepValues base{.lr = 0.1f, .momentum = 0.8f, .weight_decay = 1e-4f};
  for (std::int64_t step = 0; step < 20; ++step) {
    kernels::StepValues want = base;
    want.lr = static_cast<float>(s.LrAt(step));
    EXPECT_EQ(s.ValuesAt(step, base), want) << "step " << step;
  }
}

TEST(LrScheduleTest, OnlyAConstantWithoutWarmUpStaysStill) {
  EXPECT_FALSE(LrScheduleOptions{}.Varies());
  EXPECT_TRUE((LrScheduleOptions{.warmup_iters = 1}).Varies());
  EXPECT_TRUE((LrScheduleOptions{.kind = LrScheduleKind::kCosine}).Varies());
  EXPECT_TRUE((LrScheduleOptions{.kind = LrScheduleKind::kStep, .step_every = 5}).Varies());
}

TEST(LrScheduleTest, EachBadFlagIsRefusedByName) {
  auto refusal = [](const LrScheduleOptions& o, std::int64_t steps = 100) {
    return LrSchedule::Create(o, 0.1, steps).status();
  };
  EXPECT_THAT(refusal({.kind = LrScheduleKind::kStep}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--lr-step-every")));
  EXPECT_THAT(refusal({.kind = LrScheduleKind::kStep, .step_every = 3, .gamma = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--lr-gamma")));
  EXPECT_THAT(refusal({.warmup_iters = 5, .warmup_start_factor = 0}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--warmup-start-factor")));
  EXPECT_THAT(refusal({.warmup_iters = 5, .warmup_start_factor = 1.5}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--warmup-start-factor")));
  EXPECT_THAT(refusal({.warmup_iters = -1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--warmup-iters")));
  EXPECT_THAT(refusal({.kind = LrScheduleKind::kCosine, .lr_min = 0.2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--lr-min")));
  EXPECT_THAT(refusal({.kind = LrScheduleKind::kCosine, .warmup_iters = 100}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--warmup-iters 100")));
  EXPECT_THAT(ParseLrScheduleKind("linear").status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("constant, step or cosine")));
}

TEST(LrScheduleTest, DescribeSaysTheScheduleAndItsWarmUp) {
  const LrSchedule s = testing::ValueOrDie(LrSchedule::Create(
      {.kind = LrScheduleKind::kCosine, .warmup_iters = 50, .lr_min = 0.0}, 0.1, 1000));
  EXPECT_EQ(s.Describe(),
            "cosine from 0.1 to 0 over 950 steps after a linear warm-up of 50 "
            "steps from 0.001");
}

}  // namespace
}  // namespace phub::worker
