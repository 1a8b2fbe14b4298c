#include "bench/models/model_tables.h"

#include "absl/strings/str_cat.h"

namespace phub::bench {
namespace {

void AddConv(std::vector<keys::TensorSpec>& t, const std::string& name, std::uint64_t in,
             std::uint64_t out, std::uint64_t k) {
  t.push_back({name + ".weight", out * in * k * k});
}

void AddBatchNorm(std::vector<keys::TensorSpec>& t, const std::string& name, std::uint64_t c) {
  t.push_back({name + ".weight", c});
  t.push_back({name + ".bias", c});
}

}  // namespace

std::vector<keys::TensorSpec> ResNet50Tensors() {
  std::vector<keys::TensorSpec> t;
  AddConv(t, "conv1", 3, 64, 7);
  AddBatchNorm(t, "bn1", 64);
  const int blocks[4] = {3, 4, 6, 3};
  std::uint64_t in = 64;
  for (int layer = 0; layer < 4; ++layer) {
    const std::uint64_t width = 64u << layer, out = width * 4;
    for (int b = 0; b < blocks[layer]; ++b) {
      std::string p = absl::StrCat("layer", layer + 1, ".", b);
      AddConv(t, p + ".conv1", in, width, 1);
      AddBatchNorm(t, p + ".bn1", width);
      AddConv(t, p + ".conv2", width, width, 3);
      AddBatchNorm(t, p + ".bn2", width);
      AddConv(t, p + ".conv3", width, out, 1);
      AddBatchNorm(t, p + ".bn3", out);
      if (b == 0) {
        AddConv(t, p + ".downsample.0", in, out, 1);
        AddBatchNorm(t, p + ".downsample.1", out);
      }
      in = out;
    }
  }
  t.push_back({"fc.weight", 2048 * 1000});
  t.push_back({"fc.bias", 1000});
  return t;
}

StatusOr<std::vector<keys::TensorSpec>> ModelTensors(const std::string& name) {
  if (name == "resnet50") return ResNet50Tensors();
  return absl::InvalidArgumentError(absl::StrCat("unknown model '", name, "': known: resnet50"));
}

}  // namespace phub::bench
