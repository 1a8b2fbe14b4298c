// ElasticBatches: an elastic job's mini-batches (docs/design.md "Elastic jobs"), numbered over
// the whole job rather than per worker. Epoch e is the permutation of (seed, e) cut into
// batches_per_epoch() consecutive batches, the job's global batches e x P .. (e + 1) x P - 1;
// in iteration t the members take global batches before(t) .. before(t) + world(t) - 1, one each
// by their place (MemberSchedule), so whoever comes or goes, no batch is taken twice and none
// is skipped (except those of a member lost mid-iteration). Made on the caller's thread, on
// demand: a worker's batch numbers jump by the world size, which changes.
//
// Across racks (docs/design.md "Racks of racks"), each rack's members number their batches over
// their rack alone, so each rack takes a slice of every epoch: rack r of R takes the epoch's
// batches r, r + R, r + 2R, ... (batches_per_epoch() is its slice's count), and no two racks
// take the same batch of an epoch whatever each rack's members do. An epoch then ends per rack.
// phub-worker does not slice yet: a fixed rack's workers shard the epoch job-wide (BatchLoader),
// which would overlap an elastic rack's slice, so it refuses --min-workers with real data
// across racks until every rack numbers its batches this way.
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
  // `dataset` must outlive it. Slice `slice` of `slices` (a rack's; 0 of 1: the whole epoch).
  // InvalidArgument for a batch below 1 or larger than the dataset, a slice not below slices,
  // or more slices than an epoch has batches.
  static StatusOr<ElasticBatches> Create(const ImageDataset& dataset, std::int64_t batch,
                                         std::uint64_t seed, std::uint32_t slice = 0,
                                         std::uint32_t slices = 1);
  // The slice's batches of an epoch (P: the epoch's, with one slice).
  std::int64_t batches_per_epoch() const { return per_epoch_; }
  // The slice's batch `global` (epoch global / P, the slice's batch global % P of it).
  StatusOr<LabeledBatch> At(std::uint64_t global);

 private:
  ElasticBatches(const ImageDataset& dataset, std::int64_t batch, std::int64_t per_epoch,
                 std::uint64_t seed, std::uint32_t slice, std::uint32_t slices)
      : d_(&dataset), batch_(batch), per_epoch_(per_epoch), seed_(seed), slice_(slice),
        slices_(slices) {}
  const ImageDataset* d_;
  std::int64_t batch_, per_epoch_;
  std::uint32_t slice_ = 0, slices_ = 1;
  std::uint64_t seed_;
  std::vector<std::int64_t> order_;  // of epoch_
  std::int64_t epoch_ = -1;
};

}  // namespace phub::worker::data
