#include "worker/data/elastic_batches.h"

#include "absl/strings/str_cat.h"

namespace phub::worker::data {

StatusOr<ElasticBatches> ElasticBatches::Create(const ImageDataset& dataset, std::int64_t batch,
                                                std::uint64_t seed) {
  if (batch < 1 || dataset.count < batch ||
      dataset.labels.size() != static_cast<std::size_t>(dataset.count)) {
    return absl::InvalidArgumentError(absl::StrCat("ElasticBatches: batch ", batch, " of a dataset of ",
                                                   dataset.count, " examples: give a batch of 1 "
                                                   "up to the dataset's size"));
  }
  return ElasticBatches(dataset, batch, dataset.count / batch, seed);
}

StatusOr<LabeledBatch> ElasticBatches::At(std::uint64_t global) {
  const auto epoch = static_cast<std::int64_t>(global / static_cast<std::uint64_t>(per_epoch_));
  const auto step = static_cast<std::int64_t>(global % static_cast<std::uint64_t>(per_epoch_));
  if (epoch != epoch_) {
    EpochOrder(*d_, seed_, epoch, /*shuffle=*/true, order_);
    epoch_ = epoch;
  }
  return MakeBatch(*d_, order_, batch_, step * batch_, 1, epoch, step);
}

}  // namespace phub::worker::data
