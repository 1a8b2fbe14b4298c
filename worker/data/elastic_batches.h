// ElasticBatches: an elastic job's mini-batches (docs/design.md "Elastic jobs"), numbered over
// the whole job rather than per worker. Epoch e is the permutation of (seed, e) cut into
// batches_per_epoch() consecutive batches, the job's global batches e x P .. (e + 1) x P - 1;
// in iteration t the members take global batches before(t) .. before(t) + world(t) - 1, one each
// by their place (MemberSchedule), so whoever comes or goes, no batch is taken twice and none
// is skipped (except those of a member lost mid-iteration). Made on the caller's thread, on
// demand: a worker's batch numbers jump by the world size, which changes.
//
// Across racks (docs/design.md "Racks of racks", "The data"), each rack's members number their
// batches over their rack alone, so each rack takes a slice of every epoch (EpochSlice): the
// epoch's batches are dealt in rounds to the job's hosts, and a rack takes its hosts' places of
// every round, whatever its members do. A fixed rack numbers its batches the same way (its
// members 0..n-1 every iteration), so it goes through its slice in exactly one round per
// iteration: fixed racks of any sizes end each epoch together, and no rack takes another's
// batch whichever racks are elastic.
//
// Thread-safety: one caller.
#pragma once

#include <cstdint>
#include <vector>

#include "phub/common/member_schedule.h"
#include "phub/common/status.h"
#include "worker/data/batch_loader.h"

namespace phub::worker::data {

// A rack's slice of every epoch: the epoch's P batches are dealt in P / of whole rounds to `of`
// places (the job's hosts; batch i x of + p is round i's for place p), and the slice takes
// places first .. first + count - 1 of every round (its rack's hosts' job ranks), in round
// order. The last P % of batches, less than a round, are taken by nobody, as BatchLoader drops
// a tail: that is what lets every fixed rack take one round an iteration. {0, 1, 1}: the whole
// epoch, every batch.
struct EpochSlice {
  std::uint32_t first = 0, count = 1, of = 1;
};

class ElasticBatches {
 public:
  // `dataset` must outlive it. InvalidArgument for a batch below 1 or larger than the dataset,
  // a slice of no place or of places beyond `of`, or an epoch of fewer batches than places.
  static StatusOr<ElasticBatches> Create(const ImageDataset& dataset, std::int64_t batch,
                                         std::uint64_t seed, EpochSlice slice = {});
  // The slice's batches of an epoch (P with the whole epoch).
  std::int64_t batches_per_epoch() const { return per_epoch_; }
  // The epoch's rounds: the iterations a rack of all its hosts takes through its slice.
  std::int64_t rounds_per_epoch() const { return per_epoch_ / slice_.count; }
  // The slice's batch `global`: epoch global / batches_per_epoch(), and of it the batch of
  // round k / count at place first + k % count, k = global % batches_per_epoch().
  StatusOr<LabeledBatch> At(std::uint64_t global);

 private:
  ElasticBatches(const ImageDataset& dataset, std::int64_t batch, std::int64_t per_epoch,
                 std::uint64_t seed, EpochSlice slice)
      : d_(&dataset), batch_(batch), per_epoch_(per_epoch), slice_(slice), seed_(seed) {}
  const ImageDataset* d_;
  std::int64_t batch_, per_epoch_;
  EpochSlice slice_;
  std::uint64_t seed_;
  std::vector<std::int64_t> order_;  // of epoch_
  std::int64_t epoch_ = -1;
};

// A fixed rack's numbering across racks: in iteration `iteration` (from 1) its `world` hosts
// are its members and rank `rank` is the rank-th, every iteration, so it takes its slice's
// batches (iteration - 1) x world + rank, as an elastic rack would whose members never change.
inline IterationMembers FixedMembers(std::uint32_t rank, std::uint32_t world,
                                     std::uint64_t iteration) {
  return {.member = true,
          .index = rank,
          .world = world,
          .member_iterations_before = (iteration - 1) * world};
}

}  // namespace phub::worker::data
