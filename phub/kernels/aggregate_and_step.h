// Tall aggregation fused with the optimizer step: one pass over memory that averages N
// workers' gradient copies of a chunk and updates the chunk's weights (and optimizer state)
// in place. Pure functions over spans; float32; no allocation; thread-compatible (callers
// give each thread its own chunks).
//
// For every element i (g is the mean gradient, wd the weight decay, added as L2 like PyTorch):
//   g = (1/N) * sum_w inputs[w][i] + wd * w[i]
//   kSgd:       w -= lr * g
//   kMomentum:  v = mu*v + g;                 w -= lr * v
//   kNesterov:  v = mu*v + g;                 w -= lr * (g + mu*v)
//   kAdam:      m = b1*m + (1-b1)*g;  s = b2*s + (1-b2)*g*g;
//               w -= lr * (m / (1-b1^t)) / (sqrt(s / (1-b2^t)) + eps)     (t = step, from 1)
//   kAverage:   w = (1/N) * sum_w inputs[w][i]   (summation mode: the old w is not read)
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "phub/common/status.h"
#include "phub/kernels/optimizer_config.h"
#include "phub/kernels/wire_format.h"

namespace phub::kernels {

// How many state arrays (each as long as the weights) the optimizer keeps: 0, 1 (velocity) or
// 2 (Adam's m and s).
int StateArrays(OptimizerKind kind);

// "sgd", "momentum", "nesterov", "adam", "average" <-> kind. Parse returns InvalidArgument listing the
// accepted names.
StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name);
std::string OptimizerName(OptimizerKind kind);
// e.g. "adam(lr=0.001, beta1=0.9, beta2=0.999, eps=1e-08, weight_decay=0)".
std::string Describe(const OptimizerConfig& config);
// InvalidArgument naming the bad hyper-parameter (lr <= 0 or not finite, momentum outside
// [0,1), betas outside [0,1), eps <= 0, weight_decay < 0; average with a weight decay, which
// is the workers' own optimizer's to apply).
Status Validate(const OptimizerConfig& config);
// The values of one iteration of a `kind` job (StepValues): the same checks, except that lr may
// be 0 (a schedule's warm-up may start there and a cosine decay end there, as torch allows).
Status ValidateStepValues(OptimizerKind kind, const StepValues& values);
// e.g. "lr=0.05, momentum=0.9, weight_decay=0.0001": the values `kind` uses.
std::string Describe(OptimizerKind kind, const StepValues& values);

// REQUIRES: inputs.size() >= 1; every input, weights and each used state array have the same
//           length; state.size() >= StateArrays(config.kind); step >= 1 (Adam's t).
// `inputs[w]` is worker w's gradient copy of the chunk. Arrays may be of any length and need
// not be aligned; the inputs are only read. No array may overlap another (the kernel is
// compiled with __restrict); an input may repeat in `inputs` (it is only read).
// Single-threaded, no heap allocation (an 8 KiB stack block when N > 4).
void AggregateAndStep(std::span<const float* const> inputs, std::span<float> weights,
                      std::span<float* const> state, const OptimizerConfig& config,
                      std::uint64_t step);

// The same step out of place: the old weights are read from `weights_in` (left as they are) and
// the new ones written to `weights_out`, in the same single pass and with the same bits as the
// in-place form: a caller that must keep the previous weights (phubd, for a worker that rejoins)
// alternates two buffers instead of copying one. REQUIRES: as above, and weights_in and
// weights_out of the same length, not overlapping each other or anything else.
void AggregateAndStep(std::span<const float* const> inputs, std::span<const float> weights_in,
                      std::span<float> weights_out, std::span<float* const> state,
                      const OptimizerConfig& config, std::uint64_t step);

// The same two forms with the workers' copies in a compact wire format (wire_format.h): each
// element is widened to float as it is read, in the same single pass; weights and state stay
// float32. Same requirements, same results as converting the inputs to float first.
void AggregateAndStep(std::span<const Bf16* const> inputs, std::span<float> weights,
                      std::span<float* const> state, const OptimizerConfig& config,
                      std::uint64_t step);
void AggregateAndStep(std::span<const Fp16* const> inputs, std::span<float> weights,
                      std::span<float* const> state, const OptimizerConfig& config,
                      std::uint64_t step);
void AggregateAndStep(std::span<const Bf16* const> inputs, std::span<const float> weights_in,
                      std::span<float> weights_out, std::span<float* const> state,
                      const OptimizerConfig& config, std::uint64_t step);
void AggregateAndStep(std::span<const Fp16* const> inputs, std::span<const float> weights_in,
                      std::span<float> weights_out, std::span<float* const> state,
                      const OptimizerConfig& config, std::uint64_t step);

}  // namespace phub::kernels
