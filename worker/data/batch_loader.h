// One worker's mini-batches of an in-memory image dataset, prepared one step ahead by a
// background thread so data never stalls compute.
//
// Sharding: every epoch all workers draw the same permutation of the dataset (from seed and
// epoch) and worker `rank` takes positions rank, rank + world, ...: equal shards, disjoint, and
// different every epoch. The tail that does not fill a batch is dropped (every worker then runs
// the same number of steps, which synchronous SGD needs).
//
// Errors never leave the background thread as exceptions: a batch it cannot make (a label that
// is not a class, memory it cannot get) is recorded, the thread stops, and the consumer's next
// Next returns that Status, as does every call after it (the batches made before it are
// returned first).
//
// Thread-safety: one consumer thread calls Next; the loader owns its background thread and
// joins it on destruction.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "phub/common/status.h"
#include "worker/data/fashion_mnist.h"
#include "worker/tensor/tensor.h"

namespace phub::worker::data {

struct LabeledBatch {
  Tensor x;       // [batch, C, rows, cols], host
  Tensor labels;  // [batch], host
  std::int64_t epoch = 0, step = 0;  // step within the epoch
};

// Epoch `epoch`'s order of the dataset's examples: a permutation drawn from (seed, epoch), the
// same on every worker, or (shuffle = false) the dataset's own order. Into `order`.
void EpochOrder(const ImageDataset& dataset, std::uint64_t seed, std::int64_t epoch, bool shuffle,
                std::vector<std::int64_t>& order);
// The batch of `batch` examples at positions first, first + stride, ... of `order`, labelled
// (epoch, step). InvalidArgument naming an example whose label is not a class.
StatusOr<LabeledBatch> MakeBatch(const ImageDataset& dataset, const std::vector<std::int64_t>& order,
                                 std::int64_t batch, std::int64_t first, std::int64_t stride,
                                 std::int64_t epoch, std::int64_t step);

class BatchLoader {
 public:
  // `dataset` must outlive the loader. shuffle = false keeps the dataset's order (evaluation).
  // InvalidArgument for a rank not below world, a batch below 1, a dataset whose images or
  // labels do not match its count and shape, or a worker's shard that holds less than one
  // batch. Starts the background thread. start_step: the first batch is that of global step
  // start_step (epoch start_step / batches_per_epoch()): a worker that resumes a job starts
  // where it must replay, with the very batches it would have had.
  static StatusOr<std::unique_ptr<BatchLoader>> Create(const ImageDataset& dataset,
                                                       std::int64_t batch, std::uint32_t rank,
                                                       std::uint32_t world, std::uint64_t seed,
                                                       bool shuffle = true,
                                                       std::int64_t start_step = 0);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  std::int64_t batches_per_epoch() const { return per_epoch_; }
  // The next batch (blocks only if the background thread is behind), or the error that stopped
  // the background thread.
  StatusOr<LabeledBatch> Next();

 private:
  BatchLoader(const ImageDataset& dataset, std::int64_t batch, std::int64_t per_epoch,
              std::uint32_t rank, std::uint32_t world, std::uint64_t seed, bool shuffle);
  // The background thread's body: returns when stopped or when a batch fails (recorded in
  // error_). Never throws.
  void Produce() noexcept;

  const ImageDataset& d_;
  std::int64_t batch_, per_epoch_;
  std::uint32_t rank_, world_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t start_step_ = 0;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<LabeledBatch> ready_;  // at most kAhead
  Status error_;                    // set once by the background thread, which then ends
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace phub::worker::data
