#include "worker/nn/layers/layers.h"
#include "worker/nn/models/models.h"

namespace phub::worker {

std::unique_ptr<Model> MakeFcn5(std::int64_t batch) {
  auto m = std::make_unique<Model>("fcn5", Shape{batch, 784});
  Model::NodeId x = Model::kInput;
  const std::int64_t widths[] = {2048, 4096, 1024};
  for (int i = 0; i < 3; ++i) {
    x = m->Add(std::make_unique<Linear>("fc" + std::to_string(i + 1), widths[i]), x);
    x = m->Add(std::make_unique<Sigmoid>("sigmoid" + std::to_string(i + 1)), x);
  }
  m->Add(std::make_unique<Linear>("fc4", 10), x);
  return m;
}

}  // namespace phub::worker
