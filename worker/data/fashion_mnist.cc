#include "worker/data/fashion_mnist.h"

#include "absl/strings/str_cat.h"
#include "worker/data/idx.h"

namespace phub::worker::data {
namespace {

constexpr float kMean = 0.2860f, kStd = 0.3530f;

StatusOr<IdxArray> Read(const std::string& dir, const std::string& name) {
  const std::string path = absl::StrCat(dir, "/", name);
  auto a = ReadIdx(path);
  if (absl::IsNotFound(a.status())) {
    return absl::NotFoundError(absl::StrCat(
        a.status().message(), ". Fashion-MNIST comes from Debian's package: apt-get install "
        "dataset-fashion-mnist (files in ", kFashionMnistDir, "), or pass --data-dir"));
  }
  return a;
}

}  // namespace

StatusOr<ImageDataset> LoadFashionMnist(const std::string& dir, Split split) {
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  PHUB_ASSIGN_OR_RETURN(IdxArray images, Read(dir, prefix + "-images-idx3-ubyte.gz"));
  PHUB_ASSIGN_OR_RETURN(IdxArray labels, Read(dir, prefix + "-labels-idx1-ubyte.gz"));
  if (images.dims.size() != 3 || labels.dims.size() != 1 || images.dims[0] != labels.dims[0]) {
    return absl::InvalidArgumentError(absl::StrCat(
        dir, "/", prefix, "-*: images of ", images.dims.size(), " dimensions and ",
        labels.dims.size() == 1 ? labels.dims[0] : 0, " labels: expected [n, 28, 28] and [n]"));
  }
  ImageDataset d;
  d.count = images.dims[0];
  d.rows = images.dims[1];
  d.cols = images.dims[2];
  d.images.resize(images.values.size());
  for (std::size_t i = 0; i < images.values.size(); ++i) {
    d.images[i] = (static_cast<float>(images.values[i]) / 255.0f - kMean) / kStd;
  }
  d.labels.resize(labels.values.size());
  for (std::size_t i = 0; i < labels.values.size(); ++i) {
    if (labels.values[i] >= d.classes) {
      return absl::InvalidArgumentError(absl::StrCat(dir, "/", prefix, "-labels: label ",
                                                     labels.values[i], " at ", i,
                                                     " is not a class (0-9): corrupt file?"));
    }
    d.labels[i] = labels.values[i];
  }
  return d;
}

}  // namespace phub::worker::data
