// What phub-worker trains on (--data): Fashion-MNIST's training batches and test set, or
// nothing (synthetic batches, made in the loop). Which batches a worker takes:
//   - a fixed job of one rack: its rank's shard of every epoch (BatchLoader, prefetched);
//   - an elastic job: the job's batches by global number (ElasticBatches), one a member an
//     iteration by its place among the iteration's members (phubd tells it);
//   - any job across racks (--topology of more than one rack): the same numbering over its
//     rack's slice of every epoch (EpochSlice: its hosts' places in every round), a fixed rack's
//     members being 0..n-1 every iteration (FixedMembers). Each rack's members number their
//     batches over their rack alone, so slices keep two racks off each other's batches whichever
//     racks are elastic (docs/design.md "Racks of racks", "The data").
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "phub/common/membership.h"
#include "phub/common/status.h"
#include "worker/data/batch_loader.h"
#include "worker/data/elastic_batches.h"
#include "worker/data/fashion_mnist.h"
#include "worker/nn/model.h"
#include "worker/phub_worker_flags.h"

namespace phub::worker {

struct TrainingData {
  // By pointer: the loaders keep the datasets' addresses.
  std::unique_ptr<data::ImageDataset> train, test;
  std::unique_ptr<data::BatchLoader> loader;     // a fixed job of one rack
  std::optional<data::ElasticBatches> numbered;  // an elastic job, or any across racks
  // Across racks: this worker's rank in its rack and the rack's hosts (a fixed rack's members).
  bool across_racks = false;
  std::uint32_t rank_in_rack = 0, rack_size = 0;
};

// Loads the data --data names for `model` (InvalidArgument for a model that does not take its
// images) and places this worker (`me`; the --topology file's rack) in it.
StatusOr<TrainingData> LoadTrainingData(const WorkerFlags& f, const Membership& me,
                                        const Model& model);

}  // namespace phub::worker
