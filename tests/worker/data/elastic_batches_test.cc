// ElasticBatches (worker/data/elastic_batches.h): an elastic job's batches by global number;
// across racks each rack takes its slice of every epoch, and the slices never share an example.
#include "worker/data/elastic_batches.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/worker/data/numbered_dataset.h"
#include "tests/worker/status_testing.h"

namespace phub::worker::data {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;


// The images of `b`.
std::vector<float> Images(const LabeledBatch& b, std::int64_t batch) {
  std::vector<float> images;
  for (std::int64_t i = 0; i < batch; ++i) images.push_back(b.x.data()[i * 4]);
  return images;
}

TEST(ElasticBatchesTest, TwoRacksSlicesOfAnEpochTakeEveryBatchOnce) {
  const ImageDataset d = Numbered(14);  // 7 batches of 2 an epoch
  PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches whole, ElasticBatches::Create(d, 2, /*seed=*/3));
  EXPECT_EQ(whole.batches_per_epoch(), 7);
  std::vector<ElasticBatches> racks;
  for (std::uint32_t r = 0; r < 2; ++r) {
    PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches slice, ElasticBatches::Create(d, 2, 3, r, 2));
    racks.push_back(std::move(slice));
  }
  EXPECT_EQ(racks[0].batches_per_epoch(), 4);  // batches 0, 2, 4, 6
  EXPECT_EQ(racks[1].batches_per_epoch(), 3);  // batches 1, 3, 5
  for (std::uint64_t epoch = 0; epoch < 2; ++epoch) {
    std::multiset<float> seen;
    for (std::uint32_t r = 0; r < 2; ++r) {
      const auto per_epoch = static_cast<std::uint64_t>(racks[r].batches_per_epoch());
      for (std::uint64_t k = 0; k < per_epoch; ++k) {
        PHUB_ASSERT_OK_AND_ASSIGN(LabeledBatch b, racks[r].At(epoch * per_epoch + k));
        EXPECT_EQ(b.epoch, static_cast<std::int64_t>(epoch));
        // The very batch the whole job's numbering has at that place of the epoch.
        PHUB_ASSERT_OK_AND_ASSIGN(LabeledBatch same, whole.At(epoch * 7 + k * 2 + r));
        EXPECT_EQ(Images(b, 2), Images(same, 2)) << "rack " << r << " batch " << k;
        for (float image : Images(b, 2)) seen.insert(image);
      }
    }
    EXPECT_EQ(seen.size(), 14u) << "epoch " << epoch;
    EXPECT_EQ(std::set<float>(seen.begin(), seen.end()).size(), 14u)
        << "an example taken twice in epoch " << epoch;
  }
}

TEST(ElasticBatchesTest, ASliceEveryRackCannotHaveIsRefused) {
  const ImageDataset d = Numbered(6);  // 3 batches of 2
  EXPECT_THAT(ElasticBatches::Create(d, 2, 1, 2, 2),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("slice 2 of 2")));
  EXPECT_THAT(ElasticBatches::Create(d, 2, 1, 0, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("every rack needs a batch of each epoch")));
  EXPECT_TRUE(ElasticBatches::Create(d, 2, 1, 2, 3).ok());
}

}  // namespace
}  // namespace phub::worker::data
