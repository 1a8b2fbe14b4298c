#include "worker/train/evaluate.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::worker {

StatusOr<Accuracy> Evaluate(Model& model, Backend& backend, const data::ImageDataset& dataset) {
  const std::int64_t batch = model.input_shape()[0];
  const std::int64_t per_image = dataset.channels * dataset.rows * dataset.cols;
  const std::int64_t classes = model.output_shape()[1];
  if (model.input_shape() != Shape{batch, dataset.channels, dataset.rows, dataset.cols} ||
      dataset.images.size() != static_cast<std::size_t>(dataset.count * per_image) ||
      dataset.labels.size() != static_cast<std::size_t>(dataset.count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Evaluate: model ", model.name(), " takes ", model.input_shape().ToString(),
                     ", the dataset has ", dataset.count, " images of ", dataset.channels, "x",
                     dataset.rows, "x", dataset.cols, " (", dataset.images.size(), " values, ",
                     dataset.labels.size(), " labels)"));
  }
  PHUB_ASSIGN_OR_RETURN(Tensor x_host, Tensor::Allocate(model.input_shape()));
  PHUB_ASSIGN_OR_RETURN(Tensor labels, Tensor::Allocate({batch}));
  Tensor x = x_host;
  if (backend.device() != Device::kCpu) {
    PHUB_ASSIGN_OR_RETURN(x, backend.Allocate(model.input_shape()));
  }
  PHUB_ASSIGN_OR_RETURN(Tensor logits, Tensor::Allocate(model.output_shape()));
  Accuracy acc;
  double loss_sum = 0;
  for (std::int64_t first = 0; first + batch <= dataset.count; first += batch) {
    std::memcpy(x_host.data(), dataset.images.data() + first * per_image,
                static_cast<std::size_t>(batch * per_image) * sizeof(float));
    std::copy_n(dataset.labels.begin() + first, batch, labels.data());
    if (x.data() != x_host.data()) PHUB_RETURN_IF_ERROR(backend.CopyFromHost(x_host, x));
    PHUB_ASSIGN_OR_RETURN(Tensor out, model.Forward(x, false));
    PHUB_RETURN_IF_ERROR(backend.CopyToHost(out, logits));
    PHUB_ASSIGN_OR_RETURN(const double loss, model.Loss(labels));
    loss_sum += loss * static_cast<double>(batch);
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
