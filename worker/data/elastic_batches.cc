#include "worker/data/elastic_batches.h"

#include "absl/strings/str_cat.h"

namespace phub::worker::data {

StatusOr<ElasticBatches> ElasticBatches::Create(const ImageDataset& dataset, std::int64_t batch,
                                                std::uint64_t seed, std::uint32_t slice,
                                                std::uint32_t slices) {
  if (batch < 1 || dataset.count < batch ||
      dataset.labels.size() != static_cast<std::size_t>(dataset.count)) {
    return absl::InvalidArgumentError(absl::StrCat("ElasticBatches: batch ", batch, " of a dataset of ",
                                                   dataset.count, " examples: give a batch of 1 "
                                                   "up to the dataset's size"));
  }
  const std::int64_t per_epoch = dataset.count / batch;
  if (slices < 1 || slice >= slices || per_epoch < slices) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ElasticBatches: slice ", slice, " of ", slices, " of an epoch of ", per_epoch,
        " batches: every rack needs a batch of each epoch (a smaller batch, or fewer racks)"));
  }
  // Batches slice, slice + slices, ... of the epoch's per_epoch.
  const std::int64_t mine = (per_epoch - slice + slices - 1) / slices;
  return ElasticBatches(dataset, batch, mine, seed, slice, slices);
}

StatusOr<LabeledBatch> ElasticBatches::At(std::uint64_t global) {
  const auto epoch = static_cast<std::int64_t>(global / static_cast<std::uint64_t>(per_epoch_));
  const auto step = static_cast<std::int64_t>(global % static_cast<std::uint64_t>(per_epoch_)) *
                        static_cast<std::int64_t>(slices_) +
                    static_cast<std::int64_t>(slice_);
  if (epoch != epoch_) {
    EpochOrder(*d_, seed_, epoch, /*shuffle=*/true, order_);
    epoch_ = epoch;
  }
  return MakeBatch(*d_, order_, batch_, step * batch_, 1, epoch, step);
}

}  // namespace phub::worker::data
