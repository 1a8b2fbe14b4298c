// The prefetching loader: shards, and errors. An error on its background thread (a batch it
// cannot make) must come back to the consumer as a Status from Next, after the batches made
// before it, and again on every later call; it must never end the process.
#include "worker/data/batch_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "tests/worker/data/numbered_dataset.h"
#include "tests/worker/status_testing.h"

namespace phub::worker::data {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;


TEST(BatchLoaderTest, WorkersTakeDisjointShardsOfTheSamePermutation) {
  const ImageDataset d = Numbered(12);
  std::set<float> seen;
  for (std::uint32_t rank = 0; rank < 2; ++rank) {
    PHUB_ASSERT_OK_AND_ASSIGN(auto loader, BatchLoader::Create(d, 3, rank, 2, /*seed=*/5));
    EXPECT_EQ(loader->batches_per_epoch(), 2);
    for (int step = 0; step < 2; ++step) {
      PHUB_ASSERT_OK_AND_ASSIGN(LabeledBatch b, loader->Next());
      EXPECT_EQ(b.x.shape(), (Shape{3, 1, 2, 2}));
      EXPECT_EQ(b.step, step);
      for (std::int64_t i = 0; i < 3; ++i) {
        const float image = b.x.data()[i * 4];
        EXPECT_EQ(b.labels.data()[i], static_cast<float>(static_cast<int>(image) % 10));
        EXPECT_TRUE(seen.insert(image).second) << "image " << image << " seen twice";
      }
    }
  }
  EXPECT_EQ(seen.size(), 12u);
}

TEST(BatchLoaderTest, BadArgumentsAreRefusedBeforeAThreadStarts) {
  const ImageDataset d = Numbered(8);
  EXPECT_THAT(BatchLoader::Create(d, 2, 2, 2, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("rank 2 of 2 workers")));
  EXPECT_THAT(BatchLoader::Create(d, 0, 0, 1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("batch 0")));
  EXPECT_THAT(BatchLoader::Create(d, 5, 0, 2, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("batch 5 is larger than a worker's shard (4 of 8")));
  ImageDataset short_labels = d;
  short_labels.labels.pop_back();
  EXPECT_THAT(BatchLoader::Create(short_labels, 2, 0, 1, 1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("32 pixel values and 7 labels, but says 8 images of 1x2x2")));
}

TEST(BatchLoaderTest, ABadLabelOnTheBackgroundThreadComesBackFromNext) {
  ImageDataset d = Numbered(8);
  d.labels[5] = 10;  // not one of the 10 classes
  // No shuffling: batches of 2 are images {0, 1}, {2, 3}, then {4, 5} fails.
  PHUB_ASSERT_OK_AND_ASSIGN(auto loader, BatchLoader::Create(d, 2, 0, 1, 1, /*shuffle=*/false));
  for (int step = 0; step < 2; ++step) {
    PHUB_ASSERT_OK_AND_ASSIGN(LabeledBatch b, loader->Next());
    EXPECT_EQ(b.x.data()[0], static_cast<float>(2 * step));
  }
  const auto bad = StatusIs(absl::StatusCode::kInvalidArgument,
                            HasSubstr("example 5 has label 10, not a class in [0, 10)"));
  EXPECT_THAT(loader->Next(), bad);
  EXPECT_THAT(loader->Next(), bad);  // and again: the thread has stopped, the error stays
}

TEST(BatchLoaderTest, DestroyingItWhileTheThreadWaitsToProduceEndsCleanly) {
  const ImageDataset d = Numbered(64);
  PHUB_ASSERT_OK_AND_ASSIGN(auto loader, BatchLoader::Create(d, 2, 0, 1, 1));
  PHUB_ASSERT_OK_AND_ASSIGN(LabeledBatch b, loader->Next());
  EXPECT_EQ(b.step, 0);
  loader.reset();  // joins the thread, blocked on a full queue
  EXPECT_EQ(loader, nullptr);
}

}  // namespace
}  // namespace phub::worker::data
