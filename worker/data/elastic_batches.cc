#include "worker/data/elastic_batches.h"

#include "absl/strings/str_cat.h"

namespace phub::worker::data {

StatusOr<ElasticBatches> ElasticBatches::Create(const ImageDataset& dataset, std::int64_t batch,
                                                std::uint64_t seed, EpochSlice slice) {
  if (batch < 1 || dataset.count < batch ||
      dataset.labels.size() != static_cast<std::size_t>(dataset.count)) {
    return absl::InvalidArgumentError(absl::StrCat("ElasticBatches: batch ", batch, " of a dataset of ",
                                                   dataset.count, " examples: give a batch of 1 "
                                                   "up to the dataset's size"));
  }
  const std::int64_t per_epoch = dataset.count / batch;
  if (slice.count < 1 || slice.of < 1 || slice.first >= slice.of ||
      slice.count > slice.of - slice.first) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ElasticBatches: places ", slice.first, " to ", slice.first + slice.count - 1, " of ",
        slice.of, ": give a slice of one place or more among the job's hosts"));
  }
  if (per_epoch < slice.of) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ElasticBatches: an epoch of ", per_epoch, " batches of ", batch, " dealt to ", slice.of,
        " hosts: every host needs a batch of each epoch (a smaller batch, or fewer hosts)"));
  }
  const std::int64_t rounds = per_epoch / slice.of;
  return ElasticBatches(dataset, batch, rounds * slice.count, seed, slice);
}

StatusOr<LabeledBatch> ElasticBatches::At(std::uint64_t global) {
  const auto epoch = static_cast<std::int64_t>(global / static_cast<std::uint64_t>(per_epoch_));
  const auto k = static_cast<std::int64_t>(global % static_cast<std::uint64_t>(per_epoch_));
  const std::int64_t step = k / slice_.count * slice_.of + slice_.first + k % slice_.count;
  if (epoch != epoch_) {
    EpochOrder(*d_, seed_, epoch, /*shuffle=*/true, order_);
    epoch_ = epoch;
  }
  return MakeBatch(*d_, order_, batch_, step * batch_, 1, epoch, step);
}

}  // namespace phub::worker::data
