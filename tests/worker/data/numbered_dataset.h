// A dataset whose examples say who they are, for the loaders' tests: image i holds the value i
// everywhere, so a batch's examples can be told apart and counted.
#pragma once

#include <cstdint>

#include "worker/data/fashion_mnist.h"

namespace phub::worker::data {

// `count` 1x2x2 images; image i holds the value i everywhere, with label i % 10.
inline ImageDataset Numbered(std::int64_t count) {
  ImageDataset d;
  d.count = count;
  d.rows = d.cols = 2;
  for (std::int64_t i = 0; i < count; ++i) {
    for (int p = 0; p < 4; ++p) d.images.push_back(static_cast<float>(i));
    d.labels.push_back(static_cast<float>(i % 10));
  }
  return d;
}

}  // namespace phub::worker::data
