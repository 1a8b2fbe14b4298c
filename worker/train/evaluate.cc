#include "worker/train/evaluate.h"

#include <algorithm>
#include <cstring>

namespace phub::worker {

Accuracy Evaluate(Model& model, Backend& backend, const data::ImageDataset& dataset) {
  const std::int64_t batch = model.input_shape()[0];
  const std::int64_t per_image = dataset.channels * dataset.rows * dataset.cols;
  const std::int64_t classes = model.output_shape()[1];
  Tensor x_host = Tensor::Empty(model.input_shape()), labels = Tensor::Empty({batch});
  Tensor x = backend.device() == Device::kCpu ? x_host : backend.Allocate(model.input_shape());
  Tensor logits = Tensor::Empty(model.output_shape());
  Accuracy acc;
  double loss_sum = 0;
  for (std::int64_t first = 0; first + batch <= dataset.count; first += batch) {
    std::memcpy(x_host.data(), dataset.images.data() + first * per_image,
                static_cast<std::size_t>(batch * per_image) * sizeof(float));
    std::copy_n(dataset.labels.begin() + first, batch, labels.data());
    if (x.data() != x_host.data()) backend.CopyFromHost(x_host, x);
    backend.CopyToHost(model.Forward(x, false), logits);
    loss_sum += model.Loss(labels) * static_cast<double>(batch);
    for (std::int64_t i = 0; i < batch; ++i) {
      const float* row = logits.data() + i * classes;
      const auto best = std::max_element(row, row + classes) - row;
      acc.correct += best == static_cast<std::int64_t>(labels.data()[i]) ? 1 : 0;
    }
    acc.examples += batch;
  }
  acc.loss = acc.examples > 0 ? loss_sum / static_cast<double>(acc.examples) : 0;
  return acc;
}

}  // namespace phub::worker
