// Synthetic mini-batches shaped for a model, as dlbench's synthetic runs feed: uniform [-1, 1)
// inputs (or token ids in [0, vocab) for a sequence model) and uniform class labels, one per
// row of the model's logits. Deterministic in `seed`.
#pragma once

#include <cstdint>

#include "phub/common/status.h"
#include "worker/nn/model.h"
#include "worker/tensor/tensor.h"

namespace phub::worker {

// Host tensors: x of the model's input shape, labels [rows of the logits].
struct Batch {
  Tensor x, labels;
};

// Storage only (ResourceExhausted if it cannot be had); fill it with FillSynthetic.
StatusOr<Batch> MakeSyntheticBatch(const Model& model);
// REQUIRES: `batch` is MakeSyntheticBatch(model)'s.
void FillSynthetic(const Model& model, Batch& batch, std::uint64_t seed);

}  // namespace phub::worker
