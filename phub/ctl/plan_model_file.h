// `phubctl plan --tensors-file`: a model's gradient and compute, as bench/sim/models.py writes
// them. A line per tensor in the order backward produces them: its bytes, and optionally the
// FLOPs of the backward up to it (from the tensor before); one optional line `forward FLOPS`
// (the forward pass); `#` starts a comment. FLOPs become seconds at the calibrated rate
// (phub/sim/calibration.h compute_flops_per_second, or --gpu-tflops). A file of bytes only is
// an exchange without compute, as before compute was modelled.
#pragma once

#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/sim/scenario.h"

namespace phub::ctl {

struct ModelFile {
  std::vector<sim::Tensor> tensors;  // backward_seconds from the FLOPs
  double forward_seconds = 0;
};

// The file at `path`, its FLOPs at `flops_per_second`; InvalidArgument naming the line.
StatusOr<ModelFile> ReadTensorsFile(const std::string& path, double flops_per_second);

}  // namespace phub::ctl
