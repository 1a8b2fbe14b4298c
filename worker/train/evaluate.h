// Test accuracy: the model in inference mode (BatchNorm's running stats, no dropout) over a
// whole dataset, batch by batch at the model's batch size (the tail that does not fill one is
// left out and said so by `examples`).
#pragma once

#include <cstdint>

#include "phub/common/status.h"
#include "worker/data/fashion_mnist.h"
#include "worker/nn/model.h"

namespace phub::worker {

struct Accuracy {
  std::int64_t correct = 0, examples = 0;
  double loss = 0;  // mean cross-entropy
  double fraction() const { return examples > 0 ? static_cast<double>(correct) / examples : 0; }
};

// The model's, the backend's or an allocation's error, if any; InvalidArgument if the dataset's
// images are not the model's input.
StatusOr<Accuracy> Evaluate(Model& model, Backend& backend, const data::ImageDataset& dataset);

}  // namespace phub::worker
