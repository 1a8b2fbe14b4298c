// ResNets from conv, BatchNorm, ReLU, Add and pooling layers.
#include "absl/strings/str_cat.h"
#include "worker/nn/layers/layers.h"
#include "worker/nn/models/models.h"

namespace phub::worker {
namespace {

// conv (no bias: BatchNorm follows) + BatchNorm (+ ReLU).
Model::NodeId ConvBn(Model& m, const std::string& name, Model::NodeId x, std::int64_t out,
                     std::int64_t kernel, std::int64_t stride, bool relu) {
  x = m.Add(std::make_unique<Conv2d>(name + ".conv",
                                     Conv2dOptions{.out_channels = out, .kernel = kernel,
                                                   .stride = stride, .pad = kernel / 2,
                                                   .bias = false}),
            x);
  x = m.Add(std::make_unique<BatchNorm>(name + ".bn"), x);
  return relu ? m.Add(std::make_unique<Relu>(name + ".relu"), x) : x;
}

// 1x1 (width) -> 3x3 (width, stride) -> 1x1 (4 width), plus the shortcut (a 1x1 projection
// with BatchNorm where the shape changes), then ReLU.
Model::NodeId Bottleneck(Model& m, const std::string& name, Model::NodeId x, std::int64_t width,
                         std::int64_t stride, bool project) {
  Model::NodeId y = ConvBn(m, name + ".a", x, width, 1, 1, true);
  y = ConvBn(m, name + ".b", y, width, 3, stride, true);
  y = ConvBn(m, name + ".c", y, 4 * width, 1, 1, false);
  Model::NodeId shortcut = project ? ConvBn(m, name + ".proj", x, 4 * width, 1, stride, false) : x;
  Model::NodeId sum = m.Add(std::make_unique<Add>(name + ".add"), {y, shortcut});
  return m.Add(std::make_unique<Relu>(name + ".out"), sum);
}

// 3x3 (out, stride) -> 3x3 (out), plus the option-A shortcut where the shape changes, then ReLU.
Model::NodeId Basic(Model& m, const std::string& name, Model::NodeId x, std::int64_t out,
                    std::int64_t stride, bool reshape) {
  Model::NodeId y = ConvBn(m, name + ".a", x, out, 3, stride, true);
  y = ConvBn(m, name + ".b", y, out, 3, 1, false);
  Model::NodeId shortcut =
      reshape ? m.Add(std::make_unique<Shortcut>(name + ".shortcut", out, stride), x) : x;
  Model::NodeId sum = m.Add(std::make_unique<Add>(name + ".add"), {y, shortcut});
  return m.Add(std::make_unique<Relu>(name + ".out"), sum);
}

}  // namespace

std::unique_ptr<Model> MakeResNet56(std::int64_t batch) {
  auto m = std::make_unique<Model>("resnet56", Shape{batch, 3, 32, 32});
  Model::NodeId x = ConvBn(*m, "stem", Model::kInput, 16, 3, 1, true);
  std::int64_t width = 16;
  for (int stage = 0; stage < 3; ++stage, width *= 2) {
    for (int b = 0; b < 9; ++b) {  // 6n + 2 = 56 layers with n = 9
      const bool first = b == 0 && stage > 0;
      x = Basic(*m, absl::StrCat("layer", stage + 1, ".", b), x, width, first ? 2 : 1, first);
    }
  }
  x = m->Add(std::make_unique<Pool>("avgpool", PoolOptions{.global = true}), x);
  m->Add(std::make_unique<Linear>("fc", 10), x);
  return m;
}

std::unique_ptr<Model> MakeResNet50(std::int64_t batch, std::int64_t image) {
  auto m = std::make_unique<Model>("resnet50", Shape{batch, 3, image, image});
  Model::NodeId x = ConvBn(*m, "stem", Model::kInput, 64, 7, 2, true);
  x = m->Add(std::make_unique<Pool>("stem.pool", PoolOptions{.kernel = 3, .stride = 2, .pad = 1}),
             x);
  const std::int64_t blocks[] = {3, 4, 6, 3};
  std::int64_t width = 64;
  for (int stage = 0; stage < 4; ++stage, width *= 2) {
    for (std::int64_t b = 0; b < blocks[stage]; ++b) {
      const std::int64_t stride = (b == 0 && stage > 0) ? 2 : 1;
      x = Bottleneck(*m, absl::StrCat("layer", stage + 1, ".", b), x, width, stride, b == 0);
    }
  }
  x = m->Add(std::make_unique<Pool>("avgpool", PoolOptions{.global = true}), x);
  m->Add(std::make_unique<Linear>("fc", 1000), x);
  return m;
}

}  // namespace phub::worker
