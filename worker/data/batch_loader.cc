#include "worker/data/batch_loader.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <new>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"

namespace phub::worker::data {
namespace {
constexpr std::size_t kAhead = 2;  // batches prepared ahead: one in use, one ready
}  // namespace

StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Create(const ImageDataset& dataset,
                                                           std::int64_t batch, std::uint32_t rank,
                                                           std::uint32_t world, std::uint64_t seed,
                                                           bool shuffle,
                                                           std::int64_t start_step) {
  if (world < 1 || rank >= world || batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat("BatchLoader: rank ", rank, " of ", world,
                                                   " workers, batch ", batch,
                                                   ": the rank must be below the world size and "
                                                   "the batch at least 1"));
  }
  const std::int64_t per_image = dataset.channels * dataset.rows * dataset.cols;
  if (dataset.count < 0 || per_image < 1 ||
      dataset.images.size() != static_cast<std::size_t>(dataset.count * per_image) ||
      dataset.labels.size() != static_cast<std::size_t>(dataset.count)) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchLoader: the dataset holds ", dataset.images.size(), " pixel values and ",
                     dataset.labels.size(), " labels, but says ", dataset.count, " images of ",
                     dataset.channels, "x", dataset.rows, "x", dataset.cols));
  }
  const std::int64_t shard = dataset.count / world;
  const std::int64_t per_epoch = shard / batch;
  if (per_epoch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch, " is larger than a worker's shard (", shard, " of ",
                     dataset.count, " examples over ", world, " workers): use a smaller --batch"));
  }
  if (start_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BatchLoader: start step ", start_step, " is negative"));
  }
  std::unique_ptr<BatchLoader> loader(
      new BatchLoader(dataset, batch, per_epoch, rank, world, seed, shuffle));
  loader->start_step_ = start_step;
  loader->thread_ = std::thread([l = loader.get()] { l->Produce(); });
  return loader;
}

BatchLoader::BatchLoader(const ImageDataset& dataset, std::int64_t batch, std::int64_t per_epoch,
                         std::uint32_t rank, std::uint32_t world, std::uint64_t seed, bool shuffle)
    : d_(dataset),
      batch_(batch),
      per_epoch_(per_epoch),
      rank_(rank),
      world_(world),
      seed_(seed),
      shuffle_(shuffle) {}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EpochOrder(const ImageDataset& dataset, std::uint64_t seed, std::int64_t epoch, bool shuffle,
                std::vector<std::int64_t>& order) {
  order.resize(static_cast<std::size_t>(dataset.count));
  std::iota(order.begin(), order.end(), 0);
  if (shuffle) {
    std::mt19937_64 rng(seed * 1000003u + static_cast<std::uint64_t>(epoch));
    std::shuffle(order.begin(), order.end(), rng);
  }
}

StatusOr<LabeledBatch> MakeBatch(const ImageDataset& d, const std::vector<std::int64_t>& order,
                                 std::int64_t batch, std::int64_t first, std::int64_t stride,
                                 std::int64_t epoch, std::int64_t step) {
  const std::int64_t per_image = d.channels * d.rows * d.cols;
  LabeledBatch b{{}, {}, epoch, step};
  PHUB_ASSIGN_OR_RETURN(b.x, Tensor::Allocate({batch, d.channels, d.rows, d.cols}));
  PHUB_ASSIGN_OR_RETURN(b.labels, Tensor::Allocate({batch}));
  for (std::int64_t i = 0; i < batch; ++i) {
    const std::int64_t src = order[static_cast<std::size_t>(first + i * stride)];
    const float label = d.labels[static_cast<std::size_t>(src)];
    // The loss would refuse it too, but here the message can say which example it is.
    if (!(label >= 0 && label < static_cast<float>(d.classes)) || label != std::floor(label)) {
      return absl::InvalidArgumentError(absl::StrCat("BatchLoader: example ", src, " has label ",
                                                     label, ", not a class in [0, ", d.classes,
                                                     "): a corrupt dataset?"));
    }
    std::memcpy(b.x.data() + i * per_image, d.images.data() + src * per_image,
                static_cast<std::size_t>(per_image) * sizeof(float));
    b.labels.data()[i] = label;
  }
  return b;
}

void BatchLoader::Produce() noexcept {
  Status failed;
  // Everything it calls reports by Status; the catch is for what the standard library may
  // still throw (std::bad_alloc from the permutation), so that nothing ends the process from
  // this thread: the consumer gets it as a Status instead.
  try {
    std::vector<std::int64_t> order;
    // A batch depends only on (seed, rank, epoch, step): starting later skips to it.
    for (std::int64_t epoch = start_step_ / per_epoch_; failed.ok(); ++epoch) {
      EpochOrder(d_, seed_, epoch, shuffle_, order);
      const std::int64_t first = epoch == start_step_ / per_epoch_ ? start_step_ % per_epoch_ : 0;
      for (std::int64_t step = first; step < per_epoch_; ++step) {
        // This worker's stride: positions (step * batch + i) * world + rank.
        StatusOr<LabeledBatch> b =
            MakeBatch(d_, order, batch_, step * batch_ * world_ + rank_, world_, epoch, step);
        if (!b.ok()) {
          failed = b.status();
          break;
        }
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stop_ || ready_.size() < kAhead; });
        if (stop_) return;
        ready_.push_back(*std::move(b));
        cv_.notify_all();
      }
    }
  } catch (const std::bad_alloc&) {
    failed = absl::ResourceExhaustedError("BatchLoader: out of host memory making a batch");
  } catch (const std::exception& e) {
    failed = absl::InternalError(absl::StrCat("BatchLoader: ", e.what()));
  }
  std::lock_guard lock(mu_);
  error_ = failed;
  cv_.notify_all();
}

StatusOr<LabeledBatch> BatchLoader::Next() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || !error_.ok(); });
  if (ready_.empty()) return error_;
  LabeledBatch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return b;
}

}  // namespace phub::worker::data
