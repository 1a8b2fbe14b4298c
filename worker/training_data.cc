#include "worker/training_data.h"

#include "phub/topology/topology.h"

namespace phub::worker {

StatusOr<TrainingData> LoadTrainingData(const WorkerFlags& f, const Membership& me,
                                        const Model& model) {
  TrainingData data;
  if (f.data != "fashion-mnist") return data;
  if (model.input_shape() != Shape{f.batch, 1, 28, 28}) {
    return absl::InvalidArgumentError(
        "--data fashion-mnist needs a model for 1x28x28 images (e.g. fashion-cnn); " + f.model +
        " takes " + model.input_shape().ToString());
  }
  for (auto [split, out] : {std::pair{data::Split::kTrain, &data.train},
                            std::pair{data::Split::kTest, &data.test}}) {
    PHUB_ASSIGN_OR_RETURN(data::ImageDataset set, data::LoadFashionMnist(f.data_dir, split));
    *out = std::make_unique<data::ImageDataset>(std::move(set));
  }
  data::EpochSlice slice;
  if (!f.topology.empty() && f.comm == "ps") {
    // Racks of racks: the rack's hosts' places among the job's (the file's order: job ranks).
    PHUB_ASSIGN_OR_RETURN(auto topology, topology::Topology::Load(f.topology));
    PHUB_ASSIGN_OR_RETURN(const topology::Placement place, topology.Locate(f.hostname));
    if (place.racks > 1) {
      data.across_racks = true;
      data.rank_in_rack = place.rank_in_rack;
      data.rack_size = place.rack_size;
      slice = {.first = place.rank - place.rank_in_rack,
               .count = place.rack_size,
               .of = place.world_size};
    }
  }
  if (f.min_workers > 0 || data.across_racks) {
    PHUB_ASSIGN_OR_RETURN(data.numbered,
                          data::ElasticBatches::Create(*data.train, f.batch, f.seed, slice));
  } else {
    PHUB_ASSIGN_OR_RETURN(data.loader, data::BatchLoader::Create(*data.train, f.batch, me.rank,
                                                                 me.world_size, f.seed));
  }
  return data;
}

}  // namespace phub::worker
