#include "worker/data/batch_loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <stdexcept>
#include <vector>

#include "absl/strings/str_cat.h"

namespace phub::worker::data {
namespace {
constexpr std::size_t kAhead = 2;  // batches prepared ahead: one in use, one ready
}  // namespace

BatchLoader::BatchLoader(const ImageDataset& dataset, std::int64_t batch, std::uint32_t rank,
                         std::uint32_t world, std::uint64_t seed, bool shuffle)
    : d_(dataset), batch_(batch), rank_(rank), world_(world), seed_(seed), shuffle_(shuffle) {
  if (world < 1 || rank >= world || batch < 1) {
    throw std::invalid_argument(absl::StrCat("BatchLoader: rank ", rank, " of ", world,
                                             " workers, batch ", batch));
  }
  const std::int64_t shard = dataset.count / world;
  per_epoch_ = shard / batch;
  if (per_epoch_ < 1) {
    throw std::invalid_argument(absl::StrCat("batch ", batch, " is larger than a worker's shard (",
                                             shard, " of ", dataset.count, " examples over ",
                                             world, " workers): use a smaller --batch"));
  }
  thread_ = std::thread([this] { Produce(); });
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

LabeledBatch BatchLoader::Make(const std::vector<std::int64_t>& order, std::int64_t epoch,
                               std::int64_t step) {
  const std::int64_t per_image = d_.channels * d_.rows * d_.cols;
  LabeledBatch b{Tensor::Empty({batch_, d_.channels, d_.rows, d_.cols}), Tensor::Empty({batch_}),
                 epoch, step};
  for (std::int64_t i = 0; i < batch_; ++i) {
    const std::int64_t pos = (step * batch_ + i) * world_ + rank_;  // this worker's stride
    const std::int64_t src = order[static_cast<std::size_t>(pos)];
    std::memcpy(b.x.data() + i * per_image, d_.images.data() + src * per_image,
                static_cast<std::size_t>(per_image) * sizeof(float));
    b.labels.data()[i] = d_.labels[static_cast<std::size_t>(src)];
  }
  return b;
}

void BatchLoader::Produce() {
  std::vector<std::int64_t> order(static_cast<std::size_t>(d_.count));
  for (std::int64_t epoch = 0;; ++epoch) {
    std::iota(order.begin(), order.end(), 0);
    if (shuffle_) {
      std::mt19937_64 rng(seed_ * 1000003u + static_cast<std::uint64_t>(epoch));
      std::shuffle(order.begin(), order.end(), rng);
    }
    for (std::int64_t step = 0; step < per_epoch_; ++step) {
      LabeledBatch b = Make(order, epoch, step);
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || ready_.size() < kAhead; });
      if (stop_) return;
      ready_.push_back(std::move(b));
      cv_.notify_all();
    }
  }
}

LabeledBatch BatchLoader::Next() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty(); });
  LabeledBatch b = std::move(ready_.front());
  ready_.pop_front();
  cv_.notify_all();
  return b;
}

}  // namespace phub::worker::data
