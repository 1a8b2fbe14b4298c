#include "worker/nn/layers/layers.h"
#include "worker/nn/models/models.h"

namespace phub::worker {

std::unique_ptr<Model> MakeAlexNet(std::int64_t batch) {
  auto m = std::make_unique<Model>("alexnet", Shape{batch, 3, 224, 224});
  Model::NodeId x = Model::kInput;
  // The paper's LRN (size 5, alpha 1e-4, beta 0.75, k 2) after the first two ReLUs.
  const LrnSpec lrn{.size = 5, .alpha = 1e-4f, .beta = 0.75f, .k = 2.0f};
  auto conv = [&](const char* name, std::int64_t out, std::int64_t k, std::int64_t s,
                  std::int64_t p) {
    x = m->Add(std::make_unique<Conv2d>(name, Conv2dOptions{.out_channels = out, .kernel = k,
                                                            .stride = s, .pad = p}), x);
    x = m->Add(std::make_unique<Relu>(std::string(name) + ".relu"), x);
  };
  auto pool = [&](const char* name) {
    x = m->Add(std::make_unique<Pool>(name, PoolOptions{.kernel = 3, .stride = 2}), x);
  };
  conv("conv1", 64, 11, 4, 2);  // 55x55
  x = m->Add(std::make_unique<LocalResponseNorm>("lrn1", lrn), x);
  pool("pool1");                // 27x27
  conv("conv2", 192, 5, 1, 2);
  x = m->Add(std::make_unique<LocalResponseNorm>("lrn2", lrn), x);
  pool("pool2");                // 13x13
  conv("conv3", 384, 3, 1, 1);
  conv("conv4", 256, 3, 1, 1);
  conv("conv5", 256, 3, 1, 1);
  pool("pool5");                // 6x6
  x = m->Add(std::make_unique<Dropout>("drop6", 0.5f), x);
  x = m->Add(std::make_unique<Linear>("fc6", 4096), x);
  x = m->Add(std::make_unique<Relu>("fc6.relu"), x);
  x = m->Add(std::make_unique<Dropout>("drop7", 0.5f), x);
  x = m->Add(std::make_unique<Linear>("fc7", 4096), x);
  x = m->Add(std::make_unique<Relu>("fc7.relu"), x);
  m->Add(std::make_unique<Linear>("fc8", 1000), x);
  return m;
}

}  // namespace phub::worker
