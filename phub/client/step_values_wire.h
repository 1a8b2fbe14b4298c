// A kernels::StepValues as the control plane carries it (proto StepValues), and back: the one
// conversion the client (StepWith, the Welcome's resume_values) and phubd (the job's ledger, its
// Welcomes) share. No checks here: the receiver validates (kernels::ValidateStepValues).
#pragma once

#include <cstdint>

#include "phub/kernels/optimizer_config.h"
#include "proto/phub.pb.h"

namespace phub::client {

inline void StepValuesToProto(std::uint64_t iteration, const kernels::StepValues& v,
                              proto::StepValues& out) {
  out.set_iteration(iteration);
  out.set_lr(v.lr);
  out.set_momentum(v.momentum);
  out.set_weight_decay(v.weight_decay);
  out.set_beta1(v.beta1);
  out.set_beta2(v.beta2);
  out.set_eps(v.eps);
}

inline kernels::StepValues StepValuesFromProto(const proto::StepValues& v) {
  kernels::StepValues values;
  values.lr = v.lr();
  values.momentum = v.momentum();
  values.weight_decay = v.weight_decay();
  values.beta1 = v.beta1();
  values.beta2 = v.beta2();
  values.eps = v.eps();
  return values;
}

}  // namespace phub::client
