// SnapshotBuffers: a periodic checkpoint's chunk buffers come back when the checkpoint is let
// go, and the next checkpoint copies into the same memory (phubd's RSS stays flat).
#include "phub/server/checkpoint/snapshot_buffers.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace phub::server {
namespace {

ChunkSnapshot Filled(SnapshotBuffers& buffers, std::uint32_t chunk, std::size_t floats) {
  ChunkSnapshot copy = buffers.Take(chunk);
  copy.chunk = chunk;
  copy.weights.assign(floats, 1.5f);
  copy.state.resize(1);
  copy.state[0].assign(floats, 2.5f);
  return copy;
}

TEST(SnapshotBuffers, ACheckpointLetGoHandsItsBuffersToTheNext) {
  auto buffers = std::make_shared<SnapshotBuffers>(3);
  const float* weights_at[3];
  const float* state_at[3];
  {
    std::shared_ptr<JobSnapshot> first = SnapshotBuffers::Recycling(buffers, JobSnapshot{});
    first->chunks.resize(3);
    for (std::uint32_t c = 0; c < 3; ++c) {
      first->chunks[c] = Filled(*buffers, c, 1000 + c);
      weights_at[c] = first->chunks[c].weights.data();
      state_at[c] = first->chunks[c].state[0].data();
    }
    // Nothing is spare while the writer may still hold the checkpoint.
    EXPECT_EQ(buffers->Take(1).weights.capacity(), 0u);
  }
  for (std::uint32_t c = 0; c < 3; ++c) {
    ChunkSnapshot again = Filled(*buffers, c, 1000 + c);
    EXPECT_EQ(again.weights.data(), weights_at[c]) << "chunk " << c;
    EXPECT_EQ(again.state[0].data(), state_at[c]) << "chunk " << c;
    EXPECT_EQ(again.weights[999], 1.5f);
  }
}

TEST(SnapshotBuffers, AbandonedAndForeignChunksAreHarmless) {
  auto buffers = std::make_shared<SnapshotBuffers>(2);
  {
    auto partial = SnapshotBuffers::Recycling(buffers, JobSnapshot{});
    partial->chunks.resize(2);
    partial->chunks[0] = Filled(*buffers, 0, 10);  // chunk 1 never copied: an empty slot
  }
  EXPECT_EQ(buffers->Take(0).weights.capacity(), 10u);
  EXPECT_EQ(buffers->Take(1).weights.capacity(), 0u);
  EXPECT_EQ(buffers->Take(7).weights.capacity(), 0u);  // no such chunk
  std::vector<ChunkSnapshot> foreign(1);
  foreign[0].chunk = 9;
  foreign[0].weights.assign(4, 0.0f);
  buffers->GiveBack(foreign);  // ignored, not out of bounds
  // Without a pool (no --checkpoint-every), a plain snapshot.
  auto plain = SnapshotBuffers::Recycling(nullptr, JobSnapshot{});
  ASSERT_NE(plain, nullptr);
}

// Cores take while the writer gives back (TSan builds check the locking).
TEST(SnapshotBuffers, CoresAndTheWriterMayRace) {
  auto buffers = std::make_shared<SnapshotBuffers>(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 200; ++round) {
        std::vector<ChunkSnapshot> mine;
        for (std::uint32_t c = t; c < 64; c += 4) mine.push_back(Filled(*buffers, c, 16));
        buffers->GiveBack(mine);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(buffers->Take(5).weights.capacity(), 16u);
}

}  // namespace
}  // namespace phub::server
