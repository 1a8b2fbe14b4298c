#include "phub/keys/key_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

namespace phub::keys {
namespace {

// The message names the wrong value and what is accepted; check by substring.
::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

constexpr std::uint64_t kChunk4K = 4096;  // 1024 elements

// Built by appending: GCC 12 at -O3 warns falsely (-Wrestrict, GCC bug 105329) on "lit" + string.
std::string Name(const char* prefix, std::uint64_t i) {
  std::string name = prefix;
  name += std::to_string(i);
  return name;
}

std::vector<TensorSpec> Tensors(std::initializer_list<std::uint64_t> elements) {
  std::vector<TensorSpec> out;
  for (std::uint64_t e : elements) out.push_back({Name("t", out.size()), e});
  return out;
}

KeyTable BuildOrDie(std::vector<TensorSpec> tensors, std::uint64_t chunk_bytes,
                    std::uint32_t num_cores) {
  StatusOr<KeyTable> table = KeyTable::Build(std::move(tensors), chunk_bytes, num_cores);
  EXPECT_TRUE(table.ok()) << table.status();
  return *std::move(table);
}

// A random table whose sizes hit the edges: empty tensors, single elements, exact multiples of
// the chunk, one element either side of a multiple, and large tensors.
struct RandomCase {
  std::vector<TensorSpec> tensors;
  std::uint64_t chunk_bytes;
  std::uint32_t num_cores;
};

RandomCase MakeRandomCase(std::uint64_t seed, std::uint64_t max_tensors = 40) {
  std::mt19937_64 rng(seed);
  RandomCase rc;
  const std::uint64_t per_chunk = std::uniform_int_distribution<std::uint64_t>(1, 2048)(rng);
  rc.chunk_bytes = per_chunk * 4;
  rc.num_cores = std::uniform_int_distribution<std::uint32_t>(1, 16)(rng);
  const std::uint64_t n = std::uniform_int_distribution<std::uint64_t>(0, max_tensors)(rng);
  for (std::uint64_t i = 0; i < n; ++i) {
    std::uint64_t e = 0;
    const std::uint64_t k = std::uniform_int_distribution<std::uint64_t>(0, 20)(rng);
    switch (std::uniform_int_distribution<int>(0, 6)(rng)) {
      case 0:
        e = 0;
        break;
      case 1:
        e = 1;
        break;
      case 2:
        e = k * per_chunk;
        break;
      case 3:
        e = k * per_chunk + 1;
        break;
      case 4:
        e = (k + 1) * per_chunk - 1;
        break;
      case 5:
        e = std::uniform_int_distribution<std::uint64_t>(1, per_chunk)(rng);
        break;
      default:
        e = std::uniform_int_distribution<std::uint64_t>(0, 50 * per_chunk)(rng);
        break;
    }
    rc.tensors.push_back({Name("r", i), e});
  }
  return rc;
}

std::uint64_t TotalBytes(const KeyTable& table) {
  std::uint64_t total = 0;
  for (const Chunk& c : table.chunks()) total += c.bytes();
  return total;
}

std::uint64_t LargestChunkBytes(const KeyTable& table) {
  std::uint64_t largest = 0;
  for (const Chunk& c : table.chunks()) largest = std::max(largest, c.bytes());
  return largest;
}

// Independent statement of the placement rule: sort everything by (bytes desc, id asc), then scan
// all cores linearly for the least-loaded one (lowest index on ties). O(C*K), for checking only.
std::vector<CoreIndex> NaiveGreedyOwners(const std::vector<Chunk>& chunks, std::uint32_t cores) {
  std::vector<std::pair<std::uint64_t, std::uint32_t>> order;
  for (const Chunk& c : chunks) order.emplace_back(c.bytes(), c.id);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::uint64_t> load(cores, 0);
  std::vector<CoreIndex> owners(chunks.size(), 0);
  for (const auto& [bytes, id] : order) {
    CoreIndex best = 0;
    for (CoreIndex c = 1; c < cores; ++c) {
      if (load[c] < load[best]) best = c;
    }
    owners[id] = best;
    load[best] += bytes;
  }
  return owners;
}

void ExpectSameTable(const KeyTable& a, const KeyTable& b) {
  EXPECT_EQ(a.tensors(), b.tensors());
  EXPECT_EQ(a.chunk_bytes(), b.chunk_bytes());
  EXPECT_EQ(a.num_cores(), b.num_cores());
  ASSERT_EQ(a.chunks().size(), b.chunks().size());
  for (std::size_t i = 0; i < a.chunks().size(); ++i) {
    const Chunk& x = a.chunks()[i];
    const Chunk& y = b.chunks()[i];
    EXPECT_EQ(x.id, y.id);
    EXPECT_EQ(x.tensor, y.tensor);
    EXPECT_EQ(x.offset, y.offset);
    EXPECT_EQ(x.elements, y.elements);
  }
  EXPECT_EQ(a.owners(), b.owners());
  for (CoreIndex c = 0; c < a.num_cores(); ++c) {
    EXPECT_EQ(a.chunks_on_core(c), b.chunks_on_core(c)) << "core " << c;
    EXPECT_EQ(a.bytes_on_core(c), b.bytes_on_core(c)) << "core " << c;
  }
}

// ---- Chunking ----

TEST(KeyTableChunking, ChunkCountIsCeilOfTensorBytesOverChunkBytes) {
  const std::vector<std::uint64_t> sizes = {1, 1023, 1024, 1025, 2048, 2049, 10000, 1 << 20};
  for (std::uint64_t e : sizes) {
    KeyTable table = BuildOrDie({{"w", e}}, kChunk4K, 1);
    EXPECT_EQ(table.chunks().size(), (e * 4 + kChunk4K - 1) / kChunk4K) << "elements " << e;
  }
}

TEST(KeyTableChunking, TensorMultipleOfChunkHasOnlyFullChunks) {
  KeyTable table = BuildOrDie(Tensors({3 * 1024}), kChunk4K, 2);
  ASSERT_EQ(table.chunks().size(), 3u);
  for (std::uint32_t i = 0; i < 3; ++i) {
    EXPECT_EQ(table.chunks()[i].offset, i * 1024u);
    EXPECT_EQ(table.chunks()[i].elements, 1024u);
    EXPECT_EQ(table.chunks()[i].bytes(), kChunk4K);
  }
}

TEST(KeyTableChunking, TensorNotMultipleOfChunkEndsWithShorterChunk) {
  KeyTable table = BuildOrDie(Tensors({2 * 1024 + 7}), kChunk4K, 2);
  ASSERT_EQ(table.chunks().size(), 3u);
  EXPECT_EQ(table.chunks()[0].offset, 0u);
  EXPECT_EQ(table.chunks()[0].elements, 1024u);
  EXPECT_EQ(table.chunks()[1].offset, 1024u);
  EXPECT_EQ(table.chunks()[1].elements, 1024u);
  EXPECT_EQ(table.chunks()[2].offset, 2048u);
  EXPECT_EQ(table.chunks()[2].elements, 7u);
  EXPECT_EQ(table.chunks()[2].bytes(), 28u);
}

TEST(KeyTableChunking, TensorSmallerThanChunkIsOneChunk) {
  KeyTable table = BuildOrDie(Tensors({1, 1023}), kChunk4K, 1);
  ASSERT_EQ(table.chunks().size(), 2u);
  EXPECT_EQ(table.chunks()[0].tensor, 0u);
  EXPECT_EQ(table.chunks()[0].offset, 0u);
  EXPECT_EQ(table.chunks()[0].elements, 1u);
  EXPECT_EQ(table.chunks()[1].tensor, 1u);
  EXPECT_EQ(table.chunks()[1].offset, 0u);
  EXPECT_EQ(table.chunks()[1].elements, 1023u);
}

TEST(KeyTableChunking, ZeroElementTensorHasNoChunks) {
  KeyTable table = BuildOrDie(Tensors({0, 5, 0, 0, 1024, 0}), kChunk4K, 3);
  ASSERT_EQ(table.chunks().size(), 2u);
  EXPECT_TRUE(table.chunks_of_tensor(0).empty());
  EXPECT_EQ(table.chunks_of_tensor(1).size(), 1u);
  EXPECT_TRUE(table.chunks_of_tensor(2).empty());
  EXPECT_TRUE(table.chunks_of_tensor(3).empty());
  EXPECT_EQ(table.chunks_of_tensor(4).size(), 1u);
  EXPECT_TRUE(table.chunks_of_tensor(5).empty());
  EXPECT_EQ(table.chunks()[0].tensor, 1u);
  EXPECT_EQ(table.chunks()[1].tensor, 4u);
}

TEST(KeyTableChunking, EmptyTensorTableHasNoChunksAndEmptyCores) {
  KeyTable table = BuildOrDie({}, kChunk4K, 4);
  EXPECT_TRUE(table.chunks().empty());
  EXPECT_TRUE(table.owners().empty());
  EXPECT_EQ(table.total_elements(), 0u);
  for (CoreIndex c = 0; c < 4; ++c) {
    EXPECT_TRUE(table.chunks_on_core(c).empty());
    EXPECT_EQ(table.bytes_on_core(c), 0u);
  }
}

TEST(KeyTableChunking, ChunkIdsAreDenseAndInTensorOrder) {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    SCOPED_TRACE(Name("seed ", seed));
    RandomCase rc = MakeRandomCase(seed);
    KeyTable table = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    const std::vector<Chunk>& chunks = table.chunks();
    for (std::size_t i = 0; i < chunks.size(); ++i) {
      ASSERT_EQ(chunks[i].id, i);
      if (i > 0) {
        // Tensor order first, then offset order within a tensor.
        ASSERT_TRUE(
            chunks[i - 1].tensor < chunks[i].tensor ||
            (chunks[i - 1].tensor == chunks[i].tensor && chunks[i - 1].offset < chunks[i].offset));
      }
    }
  }
}

TEST(KeyTableChunking, ChunksOfTensorExactlyCoverEachTensor) {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    SCOPED_TRACE(Name("seed ", seed));
    RandomCase rc = MakeRandomCase(seed);
    KeyTable table = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    const std::uint64_t per_chunk = rc.chunk_bytes / 4;
    std::size_t seen = 0;
    for (std::uint32_t t = 0; t < rc.tensors.size(); ++t) {
      std::span<const Chunk> span = table.chunks_of_tensor(t);
      std::uint64_t next = 0;
      for (std::size_t j = 0; j < span.size(); ++j) {
        const Chunk& c = span[j];
        ASSERT_EQ(c.tensor, t);
        ASSERT_EQ(c.offset, next) << "chunks of tensor " << t << " are not contiguous";
        ASSERT_GT(c.elements, 0u);
        if (j + 1 < span.size()) {
          ASSERT_EQ(c.elements, per_chunk) << "only the last chunk may be short";
        }
        ASSERT_LE(c.elements, per_chunk);
        next += c.elements;
      }
      ASSERT_EQ(next, rc.tensors[t].elements) << "tensor " << t;
      if (!span.empty()) {
        ASSERT_EQ(span.front().id, seen);
      }
      seen += span.size();
    }
    EXPECT_EQ(seen, table.chunks().size());
  }
}

TEST(KeyTableChunking, TotalElementsIsSumOfTensorElements) {
  KeyTable table = BuildOrDie(Tensors({0, 1, 1023, 1024, 1025, 123456}), kChunk4K, 3);
  EXPECT_EQ(table.total_elements(), 0u + 1 + 1023 + 1024 + 1025 + 123456);
  EXPECT_EQ(TotalBytes(table), table.total_elements() * 4);
}

TEST(KeyTableChunking, LargestAcceptedChunkBytesWorks) {
  const std::uint64_t max_chunk = std::uint64_t{std::numeric_limits<std::uint32_t>::max()} * 4;
  KeyTable table = BuildOrDie(Tensors({10, 0, 3}), max_chunk, 2);
  ASSERT_EQ(table.chunks().size(), 2u);
  EXPECT_EQ(table.chunks()[0].elements, 10u);
  EXPECT_EQ(table.chunks()[1].elements, 3u);
}

// ---- Placement ----

TEST(KeyTablePlacement, SpreadIsAtMostLargestChunkOnRandomTables) {
  for (std::uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(Name("seed ", seed));
    RandomCase rc = MakeRandomCase(seed);
    KeyTable table = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0, sum = 0;
    for (CoreIndex c = 0; c < table.num_cores(); ++c) {
      const std::uint64_t b = table.bytes_on_core(c);
      lo = std::min(lo, b);
      hi = std::max(hi, b);
      sum += b;
    }
    EXPECT_EQ(sum, TotalBytes(table));
    EXPECT_EQ(sum, table.total_elements() * 4);
    EXPECT_LE(hi - lo, LargestChunkBytes(table));
  }
}

TEST(KeyTablePlacement, MatchesNaiveGreedyReference) {
  for (std::uint64_t seed = 1000; seed < 1300; ++seed) {
    SCOPED_TRACE(Name("seed ", seed));
    RandomCase rc = MakeRandomCase(seed);
    KeyTable table = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    EXPECT_EQ(table.owners(), NaiveGreedyOwners(table.chunks(), rc.num_cores));
  }
}

// Brute force over every assignment of a tiny table: the greedy's heaviest core is within
// Graham's LPT bound (4/3 - 1/(3K)) of the best possible heaviest core, and its spread is within
// one chunk.
TEST(KeyTablePlacement, HeaviestCoreWithinLptBoundOfBruteForceOptimum) {
  std::mt19937_64 rng(7);
  for (int iter = 0; iter < 200; ++iter) {
    const std::uint32_t cores = std::uniform_int_distribution<std::uint32_t>(1, 4)(rng);
    const std::uint64_t per_chunk = std::uniform_int_distribution<std::uint64_t>(2, 16)(rng);
    std::vector<TensorSpec> tensors;
    const int n = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int i = 0; i < n; ++i) {
      tensors.push_back(
          {"b", std::uniform_int_distribution<std::uint64_t>(0, 2 * per_chunk + 1)(rng)});
    }
    KeyTable table = BuildOrDie(tensors, per_chunk * 4, cores);
    const std::size_t c = table.chunks().size();
    if (c == 0 || c > 9) continue;
    SCOPED_TRACE(Name("iter ", iter));

    std::uint64_t best = std::numeric_limits<std::uint64_t>::max();
    std::vector<std::uint32_t> assign(c, 0);
    while (true) {
      std::vector<std::uint64_t> load(cores, 0);
      for (std::size_t i = 0; i < c; ++i) load[assign[i]] += table.chunks()[i].bytes();
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      std::size_t i = 0;
      while (i < c && ++assign[i] == cores) assign[i++] = 0;
      if (i == c) break;
    }
    std::uint64_t heaviest = 0, lightest = std::numeric_limits<std::uint64_t>::max();
    for (CoreIndex k = 0; k < cores; ++k) {
      heaviest = std::max(heaviest, table.bytes_on_core(k));
      lightest = std::min(lightest, table.bytes_on_core(k));
    }
    // heaviest <= (4/3 - 1/(3K)) * best, in integers.
    EXPECT_LE(3 * cores * heaviest, (4 * cores - 1) * best);
    EXPECT_LE(heaviest - lightest, LargestChunkBytes(table));
  }
}

TEST(KeyTablePlacement, ResNet50SizedTableIsBalanced) {
  // 161 tensors, ~25.5 M elements: a few large conv/fc weights and many small BN vectors.
  std::mt19937_64 rng(50);
  std::vector<TensorSpec> tensors;
  std::uint64_t total = 0;
  for (int i = 0; i < 161; ++i) {
    std::uint64_t e = (i % 3 == 0)
                          ? std::uniform_int_distribution<std::uint64_t>(64, 2048)(rng)
                          : std::uniform_int_distribution<std::uint64_t>(4096, 470000)(rng);
    tensors.push_back({Name("layer", i), e});
    total += e;
  }
  tensors.back().elements += 25'500'000 > total ? 25'500'000 - total : 0;
  for (std::uint32_t cores : {1u, 2u, 7u, 16u, 64u}) {
    SCOPED_TRACE(Name("cores ", cores));
    KeyTable table = BuildOrDie(tensors, kChunk4K, cores);
    EXPECT_GT(table.chunks().size(), 24'000u);
    std::uint64_t lo = std::numeric_limits<std::uint64_t>::max(), hi = 0;
    for (CoreIndex c = 0; c < cores; ++c) {
      lo = std::min(lo, table.bytes_on_core(c));
      hi = std::max(hi, table.bytes_on_core(c));
    }
    EXPECT_LE(hi - lo, kChunk4K);
  }
}

TEST(KeyTablePlacement, MoreCoresThanChunksPutsOneChunkOnEachLowestCore) {
  // Chunks of 1024, 1024, 5, 3 elements on 6 cores: largest first, ties by id, to empty cores in
  // index order; cores 4 and 5 stay empty.
  KeyTable table = BuildOrDie(Tensors({3, 2048, 5}), kChunk4K, 6);
  ASSERT_EQ(table.chunks().size(), 4u);
  EXPECT_EQ(table.owners(), (std::vector<CoreIndex>{3, 0, 1, 2}));
  EXPECT_TRUE(table.chunks_on_core(4).empty());
  EXPECT_TRUE(table.chunks_on_core(5).empty());
}

TEST(KeyTablePlacement, TiesGoToLowestCoreAndLowestChunkId) {
  // Four equal chunks on two cores: 0->0, 1->1, 2->0, 3->1.
  KeyTable table = BuildOrDie(Tensors({4 * 1024}), kChunk4K, 2);
  EXPECT_EQ(table.owners(), (std::vector<CoreIndex>{0, 1, 0, 1}));
}

TEST(KeyTablePlacement, SameInputsGiveSameOwners) {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE(Name("seed ", seed));
    RandomCase rc = MakeRandomCase(seed);
    KeyTable a = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    KeyTable b = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    ExpectSameTable(a, b);
  }
}

TEST(KeyTablePlacement, ChunksOnCoreAreAscendingAndMatchOwner) {
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    SCOPED_TRACE(Name("seed ", seed));
    RandomCase rc = MakeRandomCase(seed);
    KeyTable table = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    std::vector<int> times_listed(table.chunks().size(), 0);
    for (CoreIndex c = 0; c < table.num_cores(); ++c) {
      const std::vector<std::uint32_t>& ids = table.chunks_on_core(c);
      EXPECT_TRUE(std::is_sorted(ids.begin(), ids.end()));
      for (std::uint32_t id : ids) {
        ASSERT_LT(id, table.chunks().size());
        EXPECT_EQ(table.owner(id), c);
        ++times_listed[id];
      }
    }
    for (std::size_t id = 0; id < times_listed.size(); ++id) {
      EXPECT_EQ(times_listed[id], 1) << "chunk " << id;
    }
  }
}

TEST(KeyTablePlacement, BytesOnCoreIsSumOfItsChunks) {
  RandomCase rc = MakeRandomCase(42);
  KeyTable table = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
  std::vector<std::uint64_t> expected(table.num_cores(), 0);
  for (const Chunk& c : table.chunks()) expected[table.owner(c.id)] += c.bytes();
  for (CoreIndex c = 0; c < table.num_cores(); ++c) EXPECT_EQ(table.bytes_on_core(c), expected[c]);
}

// ---- WithPlacement ----

TEST(KeyTableWithPlacement, BuiltOwnersRoundTripToIdenticalTable) {
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE(Name("seed ", seed));
    RandomCase rc = MakeRandomCase(seed);
    KeyTable built = BuildOrDie(rc.tensors, rc.chunk_bytes, rc.num_cores);
    StatusOr<KeyTable> copy =
        KeyTable::WithPlacement(rc.tensors, rc.chunk_bytes, rc.num_cores, built.owners());
    ASSERT_TRUE(copy.ok()) << copy.status();
    ExpectSameTable(built, *copy);
  }
}

TEST(KeyTableWithPlacement, UsesGivenOwnersEvenIfUnbalanced) {
  StatusOr<KeyTable> table =
      KeyTable::WithPlacement(Tensors({3000, 10}), kChunk4K, 3, {2, 2, 2, 0});
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ(table->chunks_on_core(2), (std::vector<std::uint32_t>{0, 1, 2}));
  EXPECT_EQ(table->chunks_on_core(0), (std::vector<std::uint32_t>{3}));
  EXPECT_TRUE(table->chunks_on_core(1).empty());
  EXPECT_EQ(table->bytes_on_core(2), 3000u * 4);
  EXPECT_EQ(table->bytes_on_core(0), 40u);
}

TEST(KeyTableWithPlacement, RejectsWrongOwnerCount) {
  // 3000 elements + 10 elements -> 3 + 1 = 4 chunks.
  StatusOr<KeyTable> table = KeyTable::WithPlacement(Tensors({3000, 10}), kChunk4K, 2, {0, 1, 0});
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "owners has 3 entries"));
  EXPECT_TRUE(MessageHas(table.status(), "4 chunks"));
}

TEST(KeyTableWithPlacement, RejectsOutOfRangeOwner) {
  StatusOr<KeyTable> table =
      KeyTable::WithPlacement(Tensors({3000, 10}), kChunk4K, 2, {0, 1, 7, 0});
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "chunk 2 is core 7"));
  EXPECT_TRUE(MessageHas(table.status(), "0..1"));
}

TEST(KeyTableWithPlacement, RejectsBadChunkBytesLikeBuild) {
  StatusOr<KeyTable> table = KeyTable::WithPlacement(Tensors({10}), 4098, 2, {0});
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "4098"));
}

// ---- Build's argument checks ----

TEST(KeyTableBuild, RejectsZeroChunkBytes) {
  StatusOr<KeyTable> table = KeyTable::Build(Tensors({10}), 0, 2);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "chunk_bytes is 0"));
  EXPECT_TRUE(MessageHas(table.status(), "multiple of 4"));
}

TEST(KeyTableBuild, RejectsChunkBytesNotMultipleOf4) {
  StatusOr<KeyTable> table = KeyTable::Build(Tensors({10}), 4097, 2);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "chunk_bytes is 4097"));
  EXPECT_TRUE(MessageHas(table.status(), "multiple of 4"));
}

TEST(KeyTableBuild, RejectsChunkBytesWhoseElementsDoNotFitUint32) {
  const std::uint64_t too_big = (std::uint64_t{1} << 32) * 4;  // 17179869184
  StatusOr<KeyTable> table = KeyTable::Build(Tensors({10}), too_big, 2);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "chunk_bytes is 17179869184"));
  EXPECT_TRUE(MessageHas(table.status(), "at most 17179869180"));
}

TEST(KeyTableBuild, RejectsZeroCores) {
  StatusOr<KeyTable> table = KeyTable::Build(Tensors({10}), kChunk4K, 0);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "num_cores is 0"));
  EXPECT_TRUE(MessageHas(table.status(), "at least 1"));
}

TEST(KeyTableBuild, RejectsMoreThanMaxChunksWithoutAllocatingThem) {
  // 2^32 one-element chunks: one more than chunk ids can number.
  StatusOr<KeyTable> table =
      KeyTable::Build({{"huge", std::uint64_t{1} << 32}, {"after", 1}}, 4, 1);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "huge"));
  EXPECT_TRUE(MessageHas(table.status(), "4294967296"));
  EXPECT_TRUE(MessageHas(table.status(), "at most 4294967295 chunks"));
}

TEST(KeyTableBuild, RejectsTableWhoseBytesOverflow64Bits) {
  // 2 * 2^61 elements = 2^64 bytes, in ~2^30 chunks of the largest size.
  const std::uint64_t max_chunk = std::uint64_t{std::numeric_limits<std::uint32_t>::max()} * 4;
  const std::uint64_t e = std::uint64_t{1} << 61;
  StatusOr<KeyTable> table = KeyTable::Build({{"a", e}, {"b", e}}, max_chunk, 1);
  ASSERT_FALSE(table.ok());
  EXPECT_EQ(table.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(table.status(), "64 bits"));
}

}  // namespace
}  // namespace phub::keys
