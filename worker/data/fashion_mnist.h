// Fashion-MNIST (Zalando: 60,000 training and 10,000 test images of 28x28 clothes, 10 classes),
// as Debian's dataset-fashion-mnist package installs it: four gzip'd IDX files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "phub/common/status.h"

namespace phub::worker::data {

// Where Debian's package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

// Images as floats in NCHW [count, 1, rows, cols], normalised with the training set's mean and
// standard deviation (0.2860, 0.3530) as every Fashion-MNIST recipe does; labels as floats
// (class indices, the loss's convention).
struct ImageDataset {
  std::int64_t count = 0, channels = 1, rows = 0, cols = 0, classes = 10;
  std::vector<float> images;
  std::vector<float> labels;
};

enum class Split { kTrain, kTest };

// NotFound naming the missing file and the package that provides it; InvalidArgument for a
// corrupt file or images and labels that disagree.
StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, Split split);

}  // namespace phub::worker::data
