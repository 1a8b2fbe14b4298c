#include "worker/train/synthetic_data.h"

#include <random>

namespace phub::worker {

StatusOr<Batch> MakeSyntheticBatch(const Model& model) {
  Batch b;
  PHUB_ASSIGN_OR_RETURN(b.x, Tensor::Allocate(model.input_shape()));
  PHUB_ASSIGN_OR_RETURN(b.labels, Tensor::Allocate({model.output_shape()[0]}));
  return b;
}

void FillSynthetic(const Model& model, Batch& batch, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  if (model.input_vocab() > 0) {
    std::uniform_int_distribution<std::int64_t> id(0, model.input_vocab() - 1);
    for (float& v : batch.x.span()) v = static_cast<float>(id(rng));
  } else {
    std::uniform_real_distribution<float> value(-1.0f, 1.0f);
    for (float& v : batch.x.span()) v = value(rng);
  }
  std::uniform_int_distribution<std::int64_t> label(0, model.output_shape()[1] - 1);
  for (float& l : batch.labels.span()) l = static_cast<float>(label(rng));
}

}  // namespace phub::worker
