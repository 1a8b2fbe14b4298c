// ElasticBatches (worker/data/elastic_batches.h): an elastic job's batches by global number;
// across racks each rack takes its slice of every epoch (its hosts' places in every round), an
// elastic rack by its members and a fixed one by its hosts, and the slices never share an
// example.
#include "worker/data/elastic_batches.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
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

TEST(ElasticBatchesTest, TwoRacksSlicesOfAnEpochTakeEveryWholeRoundOnce) {
  const ImageDataset d = Numbered(14);  // 7 batches of 2 an epoch
  PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches whole, ElasticBatches::Create(d, 2, /*seed=*/3));
  EXPECT_EQ(whole.batches_per_epoch(), 7);
  std::vector<ElasticBatches> racks;
  for (std::uint32_t r = 0; r < 2; ++r) {
    PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches slice,
                              ElasticBatches::Create(d, 2, 3, {.first = r, .count = 1, .of = 2}));
    racks.push_back(std::move(slice));
  }
  // Batches 0, 2, 4 and 1, 3, 5: 3 whole rounds; batch 6, less than a round, is nobody's.
  EXPECT_EQ(racks[0].batches_per_epoch(), 3);
  EXPECT_EQ(racks[1].batches_per_epoch(), 3);
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
    EXPECT_EQ(seen.size(), 12u) << "epoch " << epoch;
    EXPECT_EQ(std::set<float>(seen.begin(), seen.end()).size(), 12u)
        << "an example taken twice in epoch " << epoch;
  }
}

// Across racks (docs/design.md "Racks of racks", "The data"): rack r0 of 3 hosts is elastic
// (its members go 2, 3, 1, 2 as its PBox decides), rack r1 of 2 hosts is fixed and numbers its
// batches as members 0..1 every iteration (FixedMembers). Each takes its hosts' places of every
// round of the epoch's 30 batches (5 hosts: 6 rounds). Over two epochs no batch is taken by
// both racks or twice by one, and together they take every batch of each epoch once.
TEST(ElasticBatchesTest, AnElasticRackAndAFixedRackTakeEveryBatchOfAnEpochOnceBetweenThem) {
  const ImageDataset d = Numbered(60);  // 30 batches of 2 an epoch
  PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches r0,
                            ElasticBatches::Create(d, 2, 5, {.first = 0, .count = 3, .of = 5}));
  PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches r1,
                            ElasticBatches::Create(d, 2, 5, {.first = 3, .count = 2, .of = 5}));
  EXPECT_EQ(r0.batches_per_epoch(), 18);
  EXPECT_EQ(r1.batches_per_epoch(), 12);
  // Either rack, at all its hosts, takes one round an iteration: fixed racks of different sizes
  // end each epoch at the same iteration.
  EXPECT_EQ(r0.rounds_per_epoch(), 6);
  EXPECT_EQ(r1.rounds_per_epoch(), 6);
  constexpr std::uint64_t kEpochs = 2;
  // By epoch, batch (its place in the epoch) -> the racks that took it.
  std::map<std::int64_t, std::map<std::int64_t, std::multiset<int>>> taken;
  std::map<std::int64_t, std::multiset<float>> examples;
  const auto take = [&](ElasticBatches& rack, int name, const IterationMembers& m) {
    for (std::uint32_t i = 0; i < m.world; ++i) {  // every member's batch of the iteration
      const std::uint64_t global = m.member_iterations_before + i;
      if (global >= kEpochs * static_cast<std::uint64_t>(rack.batches_per_epoch())) return;
      StatusOr<LabeledBatch> b = rack.At(global);
      ASSERT_TRUE(b.ok()) << b.status();
      taken[b->epoch][b->step].insert(name);
      for (float image : Images(*b, 2)) examples[b->epoch].insert(image);
    }
  };
  // r0's schedule as its PBox would announce it (ranks 0..2 of its 3 slots).
  MemberSchedule r0_members;
  r0_members.Reset(1, {0, 1}, 0);
  r0_members.Change(4, {0, 1, 2});
  r0_members.Change(9, {2});
  r0_members.Change(12, {0, 2});
  for (std::uint64_t it = 1; it <= 40; ++it) {
    take(r0, 0, r0_members.Of(it, 0));
    take(r1, 1, FixedMembers(0, 2, it));
  }
  for (std::int64_t epoch = 0; epoch < static_cast<std::int64_t>(kEpochs); ++epoch) {
    ASSERT_EQ(taken[epoch].size(), 30u) << "epoch " << epoch << " lacks batches";
    for (const auto& [step, racks] : taken[epoch]) {
      EXPECT_EQ(racks.size(), 1u) << "epoch " << epoch << " batch " << step << " taken "
                                  << racks.size() << " times";
      // The fixed rack keeps to its hosts' places (3 and 4), the elastic one to 0..2.
      EXPECT_EQ(*racks.begin(), step % 5 >= 3 ? 1 : 0) << "epoch " << epoch << " batch " << step;
    }
    EXPECT_EQ(examples[epoch].size(), 60u);
    EXPECT_EQ(std::set<float>(examples[epoch].begin(), examples[epoch].end()).size(), 60u)
        << "an example taken twice in epoch " << epoch;
  }
}

// What phub-worker does across racks (training_data.cc): every rack stops after E x Q
// iterations (Q rounds an epoch), whatever its members, so the racks end together. The fixed
// rack then has taken its hosts' places of every round of both epochs; the elastic one, below
// its hosts for a while, fewer of its own; never a batch twice, never one of the other rack's.
TEST(ElasticBatchesTest, RacksStoppedAtEpochsTimesRoundsEndTogetherAndNeverShareABatch) {
  const ImageDataset d = Numbered(60);
  PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches r0,
                            ElasticBatches::Create(d, 2, 5, {.first = 0, .count = 3, .of = 5}));
  PHUB_ASSERT_OK_AND_ASSIGN(ElasticBatches r1,
                            ElasticBatches::Create(d, 2, 5, {.first = 3, .count = 2, .of = 5}));
  constexpr std::uint64_t kEpochs = 2;
  const std::uint64_t last = kEpochs * static_cast<std::uint64_t>(r0.rounds_per_epoch());
  ASSERT_EQ(last, kEpochs * static_cast<std::uint64_t>(r1.rounds_per_epoch()));
  MemberSchedule r0_members;
  r0_members.Reset(1, {0, 1}, 0);
  r0_members.Change(4, {0, 1, 2});
  r0_members.Change(9, {2});
  std::map<std::pair<std::int64_t, std::int64_t>, int> taken;  // (epoch, place) -> times
  std::size_t by_r0 = 0, by_r1 = 0;
  for (std::uint64_t it = 1; it <= last; ++it) {
    for (auto [rack, m] : {std::pair{&r0, r0_members.Of(it, 0)}, std::pair{&r1, FixedMembers(0, 2, it)}}) {
      for (std::uint32_t i = 0; i < m.world; ++i) {
        StatusOr<LabeledBatch> b = rack->At(m.member_iterations_before + i);
        ASSERT_TRUE(b.ok()) << b.status();
        ASSERT_LT(b->epoch, static_cast<std::int64_t>(kEpochs)) << "iteration " << it;
        ++taken[{b->epoch, b->step}];
        EXPECT_EQ(b->step % 5 >= 3, rack == &r1) << "a batch of the other rack's places";
        ++(rack == &r1 ? by_r1 : by_r0);
      }
    }
  }
  for (const auto& [batch, times] : taken) {
    EXPECT_EQ(times, 1) << "epoch " << batch.first << " batch " << batch.second;
  }
  EXPECT_EQ(by_r1, 24u) << "the fixed rack takes its places of every round";
  EXPECT_EQ(by_r0, 2u * 3 + 3u * 5 + 1u * 4) << "the elastic rack takes its members' places";
}

TEST(ElasticBatchesTest, AFixedRacksMembersAreItsHostsEveryIteration) {
  const IterationMembers m = FixedMembers(1, 3, 5);
  EXPECT_TRUE(m.member);
  EXPECT_EQ(m.index, 1u);
  EXPECT_EQ(m.world, 3u);
  EXPECT_EQ(m.member_iterations_before, 12u);  // iterations 1..4 of 3 batches
}

TEST(ElasticBatchesTest, ASliceEveryRackCannotHaveIsRefused) {
  const ImageDataset d = Numbered(6);  // 3 batches of 2
  EXPECT_THAT(ElasticBatches::Create(d, 2, 1, {.first = 2, .count = 1, .of = 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("places 2 to 2 of 2")));
  EXPECT_THAT(ElasticBatches::Create(d, 2, 1, {.first = 1, .count = 2, .of = 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("places 1 to 2 of 2")));
  EXPECT_THAT(ElasticBatches::Create(d, 2, 1, {.first = 0, .count = 0, .of = 2}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("one place or more")));
  EXPECT_THAT(ElasticBatches::Create(d, 2, 1, {.first = 0, .count = 1, .of = 4}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("every host needs a batch of each epoch")));
  EXPECT_TRUE(ElasticBatches::Create(d, 2, 1, {.first = 2, .count = 1, .of = 3}).ok());
}

}  // namespace
}  // namespace phub::worker::data
