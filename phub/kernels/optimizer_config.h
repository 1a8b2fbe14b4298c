// The optimizer's kind and hyper-parameters (aggregate_and_step.h gives the equations), apart
// from the functions: plain data that CUDA sources include too (optimizer_update.h).
#pragma once

namespace phub::kernels {

// kAverage is phubd's summation mode (BytePS's servers): no optimizer, no state; the "weights"
// a worker receives are the mean of the workers' gradients, and the workers step themselves.
enum class OptimizerKind { kSgd, kMomentum, kNesterov, kAdam, kAverage };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float lr = 0.01f;
  float momentum = 0.9f;     // kMomentum, kNesterov
  float weight_decay = 0.0f;
  float beta1 = 0.9f;        // kAdam
  float beta2 = 0.999f;      // kAdam
  float eps = 1e-8f;         // kAdam
  // How many workers' gradients the inputs hold between them: the mean gradient is their sum
  // over this. 0: one each (N, the number of inputs). A PBox that sums its rack's copies before
  // passing them on (racks of racks, docs/design.md) makes each input a sum of several, and
  // the PBox that owns the chunk divides by every worker of the job; with 1 and kAverage the
  // "weights" are the plain sum.
  unsigned copies = 0;
};

// The hyper-parameters a job may change from one iteration to the next (a learning-rate
// schedule; weight decay, momentum and Adam's betas and eps as well): OptimizerConfig less its
// kind. docs/design.md "Hyper-parameters per iteration".
struct StepValues {
  float lr = 0.01f;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
};

// Written out, not defaulted: CUDA sources include this header as C++17.
inline bool operator==(const StepValues& a, const StepValues& b) {
  return a.lr == b.lr && a.momentum == b.momentum && a.weight_decay == b.weight_decay &&
         a.beta1 == b.beta1 && a.beta2 == b.beta2 && a.eps == b.eps;
}

inline StepValues ValuesOf(const OptimizerConfig& config) {
  StepValues values;
  values.lr = config.lr;
  values.momentum = config.momentum;
  values.weight_decay = config.weight_decay;
  values.beta1 = config.beta1;
  values.beta2 = config.beta2;
  values.eps = config.eps;
  return values;
}

// `config` stepping with `values`: its kind and copies, their hyper-parameters.
inline OptimizerConfig WithValues(OptimizerConfig config, const StepValues& values) {
  config.lr = values.lr;
  config.momentum = values.momentum;
  config.weight_decay = values.weight_decay;
  config.beta1 = values.beta1;
  config.beta2 = values.beta2;
  config.eps = values.eps;
  return config;
}

}  // namespace phub::kernels
