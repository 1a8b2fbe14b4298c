// Parameter tensor tables of reference models, for benchmarks and the demo that move
// model-shaped gradients before real training exists (worker/nn/ builds the real models).
// Order = parameter registration order (forward order); backward produces them in reverse.
#pragma once

#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/keys/key_table.h"

namespace phub::bench {

// torchvision's ResNet-50 (ImageNet, 1000 classes): 161 tensors, 25,557,032 parameters.
std::vector<keys::TensorSpec> ResNet50Tensors();

// "resnet50" -> ResNet50Tensors(); InvalidArgument listing known names otherwise.
StatusOr<std::vector<keys::TensorSpec>> ModelTensors(const std::string& name);

}  // namespace phub::bench
