// --save-weights: every parameter of the model, in its order, as raw float32 — to compare the
// final weights of two runs bitwise (a run with failures against one without).
#pragma once

#include <string>

#include "phub/common/status.h"
#include "worker/nn/model.h"

namespace phub::worker {

Status SaveWeights(Model& model, Backend& backend, const std::string& path);

}  // namespace phub::worker
