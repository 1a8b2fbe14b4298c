// ElasticBatches: an elastic job's mini-batches (docs/design.md "Elastic jobs"), numbered over
// the whole job rather than per worker. Epoch e is the permutation of (seed, e) cut into
// batches_per_epoch() consecutive batches, the job's global batches e x P .. (e + 1) x P - 1;
// in iteration t the members take global batches before(t) .. before(t) + world(t) - 1, one each
// by their place (MemberSchedule), so whoever comes or goes, no batch is taken twice and none
// is skipped (except those of a member lost mid-iteration). Made on the caller's thread, on
// demand: a worker's batch numbers jump by the world size, which changes.
//
// Thread-safety: one caller.
#pragma once

#include <cstdint>
#include <vector>

#include "phub/common/status.h"
#include "worker/data/batch_loader.h"

namespace phub::worker::data {

class ElasticBatches {
 public:
  // `dataset` must outlive it. InvalidArgument for a batch below 1 or larger than the dataset.
  static StatusOr<ElasticBatches> Create(const ImageDataset& dataset, std::int64_t batch,
                                         std::uint64_t seed);
  std::int64_t batches_per_epoch() const { return per_epoch_; }
  // Global batch `global` (epoch global / P, step global % P).
  StatusOr<LabeledBatch> At(std::uint64_t global);

 private:
  ElasticBatches(const ImageDataset& dataset, std::int64_t batch, std::int64_t per_epoch,
                 std::uint64_t seed)
      : d_(&dataset), batch_(batch), per_epoch_(per_epoch), seed_(seed) {}
  const ImageDataset* d_;
  std::int64_t batch_, per_epoch_;
  std::uint64_t seed_;
  std::vector<std::int64_t> order_;  // of epoch_
  std::int64_t epoch_ = -1;
};

}  // namespace phub::worker::data
