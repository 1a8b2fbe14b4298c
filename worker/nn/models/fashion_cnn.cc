#include "worker/nn/layers/layers.h"
#include "worker/nn/models/models.h"

namespace phub::worker {

std::unique_ptr<Model> MakeFashionCnn(std::int64_t batch) {
  auto m = std::make_unique<Model>("fashion-cnn", Shape{batch, 1, 28, 28});
  Model::NodeId x = Model::kInput;
  x = m->Add(std::make_unique<Conv2d>("conv1", Conv2dOptions{.out_channels = 32, .kernel = 5,
                                                             .pad = 2}), x);
  x = m->Add(std::make_unique<Relu>("relu1"), x);
  x = m->Add(std::make_unique<Pool>("pool1", PoolOptions{}), x);  // 14x14
  x = m->Add(std::make_unique<Conv2d>("conv2", Conv2dOptions{.out_channels = 64, .kernel = 5,
                                                             .pad = 2}), x);
  x = m->Add(std::make_unique<Relu>("relu2"), x);
  x = m->Add(std::make_unique<Pool>("pool2", PoolOptions{}), x);  // 7x7
  x = m->Add(std::make_unique<Linear>("fc1", 1024), x);
  x = m->Add(std::make_unique<Relu>("relu3"), x);
  m->Add(std::make_unique<Linear>("fc2", 10), x);
  return m;
}

}  // namespace phub::worker
