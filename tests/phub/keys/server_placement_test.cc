// SpreadOverServers (colocated placement): every element of every tensor is owned by exactly
// one server, slices are chunk-aligned and merged where consecutive, the servers' bytes are
// balanced to within one chunk, one server gets every tensor whole, and bad input is refused.
#include "phub/keys/server_placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

namespace phub::keys {
namespace {

std::vector<TensorSpec> RandomTensors(std::mt19937& rng, std::uint64_t per_chunk) {
  std::uniform_int_distribution<int> count(1, 30);
  std::uniform_int_distribution<int> kind(0, 4);
  std::uniform_int_distribution<std::uint64_t> small(1, per_chunk - 1);
  std::uniform_int_distribution<std::uint64_t> chunks(1, 12);
  std::vector<TensorSpec> tensors;
  const int n = count(rng);
  for (int i = 0; i < n; ++i) {
    std::uint64_t e = 0;
    switch (kind(rng)) {
      case 0: e = 0; break;                                      // empty tensor
      case 1: e = small(rng); break;                             // less than a chunk
      case 2: e = chunks(rng) * per_chunk; break;                // exact multiple
      case 3: e = chunks(rng) * per_chunk + small(rng); break;   // ragged tail
      default: e = chunks(rng) * per_chunk - 1; break;           // one short of a multiple
    }
    std::string name = "layer";
    name += std::to_string(i);
    tensors.push_back({name, e});
  }
  return tensors;
}

TEST(SpreadOverServersTest, EveryElementHasExactlyOneServerAndLoadsAreBalanced) {
  std::mt19937 rng(2026);
  for (int trial = 0; trial < 200; ++trial) {
    const std::uint64_t chunk_bytes = 4 * std::uniform_int_distribution<std::uint64_t>(1, 64)(rng);
    const std::uint64_t per_chunk = chunk_bytes / 4;
    if (per_chunk < 2) continue;
    const std::uint32_t servers = std::uniform_int_distribution<std::uint32_t>(1, 9)(rng);
    const auto tensors = RandomTensors(rng, per_chunk);
    auto shares = SpreadOverServers(tensors, chunk_bytes, servers);
    ASSERT_TRUE(shares.ok()) << shares.status();
    ASSERT_EQ(shares->size(), servers);

    // Coverage by a naive per-element count.
    std::vector<std::vector<int>> owners(tensors.size());
    for (std::size_t t = 0; t < tensors.size(); ++t) owners[t].assign(tensors[t].elements, 0);
    std::uint64_t max_bytes = 0, min_bytes = UINT64_MAX, total = 0;
    for (const ServerShare& share : *shares) {
      ASSERT_EQ(share.slices.size(), share.tensors.size());
      std::uint64_t bytes = 0;
      for (std::size_t i = 0; i < share.slices.size(); ++i) {
        const TensorSlice& s = share.slices[i];
        ASSERT_LT(s.tensor, tensors.size());
        ASSERT_GT(s.elements, 0u);
        ASSERT_LE(s.offset + s.elements, tensors[s.tensor].elements);
        EXPECT_EQ(s.offset % per_chunk, 0u) << "slice not chunk-aligned";
        EXPECT_EQ(share.tensors[i].elements, s.elements);
        const bool whole = s.elements == tensors[s.tensor].elements;
        std::string name = tensors[s.tensor].name;
        if (!whole) name.append("@").append(std::to_string(s.offset));
        EXPECT_EQ(share.tensors[i].name, name);
        for (std::uint64_t e = s.offset; e < s.offset + s.elements; ++e) ++owners[s.tensor][e];
        bytes += s.elements * 4;
        // Slices of one tensor on one server are never adjacent: they would have been merged.
        if (i > 0 && share.slices[i - 1].tensor == s.tensor) {
          EXPECT_LT(share.slices[i - 1].offset + share.slices[i - 1].elements, s.offset);
        }
      }
      max_bytes = std::max(max_bytes, bytes);
      min_bytes = std::min(min_bytes, bytes);
      total += bytes;
    }
    for (std::size_t t = 0; t < tensors.size(); ++t) {
      for (std::uint64_t e = 0; e < tensors[t].elements; ++e) {
        ASSERT_EQ(owners[t][e], 1) << "tensor " << t << " element " << e;
      }
    }
    // Balanced: the heaviest server carries at most one chunk more than the lightest one that
    // could have been given work (greedy least-loaded).
    std::uint64_t chunks = 0;
    for (const auto& t : tensors) chunks += (t.elements + per_chunk - 1) / per_chunk;
    if (chunks >= servers) {
      EXPECT_LE(max_bytes - min_bytes, chunk_bytes) << "trial " << trial;
    }
  }
}

TEST(SpreadOverServersTest, OneServerGetsEveryNonEmptyTensorWhole) {
  std::vector<TensorSpec> tensors = {{"a", 10}, {"empty", 0}, {"b", 1000}, {"c", 1}};
  auto shares = SpreadOverServers(tensors, 16, 1);
  ASSERT_TRUE(shares.ok()) << shares.status();
  ASSERT_EQ(shares->size(), 1u);
  const ServerShare& share = (*shares)[0];
  ASSERT_EQ(share.tensors.size(), 3u);
  EXPECT_EQ(share.tensors[0], (TensorSpec{"a", 10}));
  EXPECT_EQ(share.tensors[1], (TensorSpec{"b", 1000}));
  EXPECT_EQ(share.tensors[2], (TensorSpec{"c", 1}));
  EXPECT_EQ(share.slices[1].tensor, 2u);
}

TEST(SpreadOverServersTest, FullChunksOfATensorGoRoundRobin) {
  // 4 full chunks of 4 elements over 2 servers: chunks 0, 2 on server 0 and 1, 3 on server 1.
  auto shares = SpreadOverServers({{"w", 16}}, 16, 2);
  ASSERT_TRUE(shares.ok()) << shares.status();
  ASSERT_EQ((*shares)[0].slices.size(), 2u);
  EXPECT_EQ((*shares)[0].slices[0].offset, 0u);
  EXPECT_EQ((*shares)[0].slices[1].offset, 8u);
  EXPECT_EQ((*shares)[1].slices[0].offset, 4u);
  EXPECT_EQ((*shares)[1].tensors[1].name, "w@12");
}

TEST(SpreadOverServersTest, BadArgumentsAreRefusedWithTheReason) {
  auto zero_servers = SpreadOverServers({{"w", 16}}, 16, 0);
  ASSERT_FALSE(zero_servers.ok());
  EXPECT_EQ(zero_servers.status().code(), absl::StatusCode::kInvalidArgument);
  auto odd_chunk = SpreadOverServers({{"w", 16}}, 6, 2);
  ASSERT_FALSE(odd_chunk.ok());
  EXPECT_NE(std::string(odd_chunk.status().message()).find("chunk_bytes is 6"), std::string::npos);
}

}  // namespace
}  // namespace phub::keys
