#include "phub/server/checkpoint/checkpoint_file.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <new>
#include <random>
#include <string>
#include <vector>

// The largest single allocation while `g_tracking` is on: the proof that a file claiming a huge
// model is refused before anything of that size is allocated. This binary holds only these
// tests, so replacing the global operator new here touches nothing else.
namespace {
std::atomic<bool> g_tracking{false};
std::atomic<std::size_t> g_largest{0};

// Out of line, so that the compiler does not pair an inlined free() with a `new` it sees.
[[gnu::noinline]] void* Allocate(std::size_t n) {
  if (g_tracking.load(std::memory_order_relaxed)) {
    std::size_t seen = g_largest.load(std::memory_order_relaxed);
    while (n > seen && !g_largest.compare_exchange_weak(seen, n)) {
    }
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void Release(void* p) noexcept { std::free(p); }
}  // namespace

void* operator new(std::size_t n) { return Allocate(n); }
void* operator new[](std::size_t n) { return Allocate(n); }
void operator delete(void* p) noexcept { Release(p); }
void operator delete[](void* p) noexcept { Release(p); }
void operator delete(void* p, std::size_t) noexcept { Release(p); }
void operator delete[](void* p, std::size_t) noexcept { Release(p); }

namespace phub::server {
namespace {

namespace fs = std::filesystem;
using kernels::OptimizerKind;

::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (!status.ok() && std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "status \"" << status << "\" lacks \"" << part << "\"";
}

// Random bit patterns, NaNs and denormals included: only a bitwise copy survives the trip.
std::vector<float> RandomFloats(std::size_t n, std::mt19937& rng) {
  std::vector<float> v(n);
  for (float& f : v) {
    const std::uint32_t bits = rng();
    std::memcpy(&f, &bits, sizeof f);
  }
  return v;
}

// 4 tensors (one empty) in chunks of 256 floats: 8 chunks, the last of each tensor shorter.
// `large` adds a tensor in chunks of 64 Ki floats, written straight from the arrays.
JobSnapshot MakeSnapshot(OptimizerKind kind, bool previous, std::uint32_t seed = 1,
                         bool large = false) {
  std::mt19937 rng(seed);
  JobSnapshot s;
  s.tensors = {{"conv1.weight", 300}, {"conv1.bias", 5}, {"empty", 0}, {"fc.weight", 1030}};
  s.chunk_bytes = 1024;
  if (large) {
    s.tensors.push_back({"big", 100000});
    s.chunk_bytes = 256 << 10;
  }
  s.world_size = 3;
  s.optimizer.kind = kind;
  s.optimizer.lr = 0.125f;
  auto table = keys::KeyTable::Build(s.tensors, s.chunk_bytes, 1);
  EXPECT_TRUE(table.ok()) << table.status();
  for (const keys::Chunk& chunk : table->chunks()) {
    ChunkSnapshot c;
    c.chunk = chunk.id;
    c.iteration = 41 + chunk.id % 2;  // one aggregation apart, as between two of them
    c.weights = RandomFloats(chunk.elements, rng);
    if (previous) c.previous = RandomFloats(chunk.elements, rng);
    for (int i = 0; i < kernels::StateArrays(kind); ++i) {
      c.state.push_back(RandomFloats(chunk.elements, rng));
    }
    s.chunks.push_back(std::move(c));
  }
  return s;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // memcmp must not be given an empty vector's null data() (UBSan), even for zero bytes.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void ExpectSame(const JobSnapshot& a, const JobSnapshot& b) {
  EXPECT_EQ(a.tensors, b.tensors);
  EXPECT_EQ(a.chunk_bytes, b.chunk_bytes);
  EXPECT_EQ(a.world_size, b.world_size);
  EXPECT_EQ(a.batches_before, b.batches_before);
  EXPECT_EQ(a.optimizer.kind, b.optimizer.kind);
  EXPECT_EQ(0, std::memcmp(&a.optimizer.lr, &b.optimizer.lr, 6 * sizeof(float)));
  ASSERT_EQ(a.chunks.size(), b.chunks.size());
  for (std::size_t i = 0; i < a.chunks.size(); ++i) {
    const ChunkSnapshot& x = a.chunks[i];
    const ChunkSnapshot& y = b.chunks[i];
    EXPECT_EQ(x.chunk, y.chunk);
    EXPECT_EQ(x.iteration, y.iteration);
    EXPECT_TRUE(SameBits(x.weights, y.weights)) << "chunk " << i;
    EXPECT_TRUE(SameBits(x.previous, y.previous)) << "chunk " << i;
    ASSERT_EQ(x.state.size(), y.state.size());
    for (std::size_t k = 0; k < x.state.size(); ++k) {
      EXPECT_TRUE(SameBits(x.state[k], y.state[k])) << "chunk " << i << " state " << k;
    }
  }
}

// Where the format puts things (checkpoint_file.h), to aim corruption at one region.
struct Layout {
  std::size_t header_end = 0;               // first byte after the header's crc
  std::vector<std::size_t> record, arrays;  // per chunk: record start, its arrays' bytes
};
Layout LayoutOf(const std::string& bytes) {
  auto u32 = [&](std::size_t at) {
    std::uint32_t v;
    std::memcpy(&v, bytes.data() + at, 4);
    return v;
  };
  Layout l;
  l.header_end = 16 + u32(12) + 4;
  const std::uint32_t chunks = u32(l.header_end - 8);
  std::size_t at = l.header_end;
  for (std::uint32_t i = 0; i < chunks; ++i) {
    const std::size_t n = std::size_t{4} * u32(at + 4) *
                          (1 + static_cast<unsigned char>(bytes[at + 16]) +
                           static_cast<unsigned char>(bytes[at + 17]));
    l.record.push_back(at);
    l.arrays.push_back(n);
    at += 24 + n + 4;
  }
  return l;
}

// Recomputes the header's crc after a test edited a header field, so the edit itself is what
// the reader meets.
void ResealHeader(std::string& bytes) {
  std::uint32_t body;
  std::memcpy(&body, bytes.data() + 12, 4);
  const std::size_t end = 16 + body;
  const auto crc = static_cast<std::uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(end)));
  std::memcpy(bytes.data() + end, &crc, 4);
}

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "phub_checkpoint_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    fs::remove_all(dir_);
    ASSERT_TRUE(fs::create_directories(dir_));
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const JobSnapshot& s, int keep = 2) {
    StatusOr<std::string> path = WriteCheckpoint(dir_, s, keep);
    EXPECT_TRUE(path.ok()) << path.status();
    return path.ok() ? *path : "";
  }
  std::string Path(const std::string& name) const { return dir_ + "/" + name; }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(dir_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }
  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  static void WriteBytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good()) << path;
  }
  // A snapshot whose chunks are all at `iteration`.
  static JobSnapshot AtIteration(std::uint64_t iteration) {
    JobSnapshot s = MakeSnapshot(OptimizerKind::kMomentum, true, static_cast<int>(iteration));
    for (auto& c : s.chunks) c.iteration = iteration;
    return s;
  }

  std::string dir_;
};

struct RoundTripCase {
  OptimizerKind kind;
  bool previous;
  bool large;
};

class CheckpointRoundTripTest : public CheckpointFileTest,
                                public ::testing::WithParamInterface<RoundTripCase> {};

TEST_P(CheckpointRoundTripTest, ReadsBackBitForBit) {
  const RoundTripCase& p = GetParam();
  const JobSnapshot s = MakeSnapshot(p.kind, p.previous, 7, p.large);
  const std::string path = Write(s);
  EXPECT_EQ(fs::file_size(path), CheckpointBytes(s));
  EXPECT_EQ(ReadBytes(path), EncodeCheckpoint(s));  // the file is exactly the encoding
  StatusOr<JobSnapshot> back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status();
  ExpectSame(s, *back);
  EXPECT_EQ(back->chunks[0].state.size(), static_cast<std::size_t>(kernels::StateArrays(p.kind)));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, CheckpointRoundTripTest,
                         ::testing::Values(RoundTripCase{OptimizerKind::kSgd, false, false},
                                           RoundTripCase{OptimizerKind::kSgd, true, false},
                                           RoundTripCase{OptimizerKind::kMomentum, false, false},
                                           RoundTripCase{OptimizerKind::kMomentum, true, false},
                                           RoundTripCase{OptimizerKind::kNesterov, true, false},
                                           RoundTripCase{OptimizerKind::kAdam, false, false},
                                           RoundTripCase{OptimizerKind::kAdam, true, false},
                                           RoundTripCase{OptimizerKind::kAdam, true, true}));

// The batches a job took (an elastic job's data position) make a version 2 file; a snapshot
// without them is written as version 1, and both read back as written. A count no job of its
// world size could have taken in its iterations is refused, written or read.
TEST_F(CheckpointFileTest, BatchesTakenMakeVersionTwoAndVersionOneStillReads) {
  JobSnapshot s = AtIteration(7);
  s.world_size = 3;
  for (std::optional<std::uint64_t> batches : {std::optional<std::uint64_t>(),
                                               std::optional<std::uint64_t>(19)}) {
    s.batches_before = batches;
    const std::string path = Write(s);
    const std::string bytes = ReadBytes(path);
    std::uint32_t version;
    std::memcpy(&version, bytes.data() + 8, 4);
    EXPECT_EQ(version, batches ? 2u : 1u);
    EXPECT_EQ(bytes, EncodeCheckpoint(s));
    StatusOr<JobSnapshot> back = ReadCheckpoint(path);
    ASSERT_TRUE(back.ok()) << back.status();
    ExpectSame(s, *back);
  }
  s.batches_before = 7 * 3 + 1;
  EXPECT_TRUE(MessageHas(ValidateSnapshot(s), "took 22 batches in 7 iterations of at most 3"));
  // The same claim in a file whose checksums hold.
  s.batches_before = 7 * 3;
  std::string bytes = EncodeCheckpoint(s);
  const std::uint64_t claim = 22;
  std::memcpy(bytes.data() + 16 + 40, &claim, 8);  // after chunk_bytes, world, kind, 6 floats
  std::uint32_t body;
  std::memcpy(&body, bytes.data() + 12, 4);
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(0, reinterpret_cast<const Bytef*>(bytes.data()), 16 + body));
  std::memcpy(bytes.data() + 16 + body, &crc, 4);
  StatusOr<JobSnapshot> read = DecodeCheckpoint(bytes, "forged");
  EXPECT_TRUE(MessageHas(read.status(), "took 22 batches in 7 iterations of at most 3"))
      << read.status();
}

TEST_F(CheckpointFileTest, NamedForTheSmallestIterationOfItsChunks) {
  JobSnapshot s = MakeSnapshot(OptimizerKind::kSgd, false);
  s.chunks[3].iteration = 40;  // the others are 41 and 42
  EXPECT_EQ(CheckpointIteration(s), 40u);
  EXPECT_EQ(Write(s), Path("checkpoint-000000000040.phub"));
  EXPECT_EQ(CheckpointFileName(0), "checkpoint-000000000000.phub");
  EXPECT_EQ(CheckpointFileName(1234567890123), "checkpoint-1234567890123.phub");
}

TEST_F(CheckpointFileTest, KeepsTheNewestAndDeletesOlderOnes) {
  for (std::uint64_t it = 1; it <= 5; ++it) Write(AtIteration(it));
  EXPECT_EQ(Names(), (std::vector<std::string>{"checkpoint-000000000004.phub",
                                               "checkpoint-000000000005.phub"}));
  for (std::uint64_t it = 6; it <= 8; ++it) Write(AtIteration(it), 3);
  EXPECT_EQ(Names(), (std::vector<std::string>{"checkpoint-000000000006.phub",
                                               "checkpoint-000000000007.phub",
                                               "checkpoint-000000000008.phub"}));
  // A job resumed from an older checkpoint: the newer file is not deleted, nor the new one.
  Write(AtIteration(3));
  EXPECT_EQ(Names(), (std::vector<std::string>{
                         "checkpoint-000000000003.phub", "checkpoint-000000000006.phub",
                         "checkpoint-000000000007.phub", "checkpoint-000000000008.phub"}));
  Write(AtIteration(9));
  EXPECT_EQ(Names(), (std::vector<std::string>{"checkpoint-000000000008.phub",
                                               "checkpoint-000000000009.phub"}));
}

TEST_F(CheckpointFileTest, SameIterationReplacesTheFile) {
  Write(AtIteration(4));
  JobSnapshot s = AtIteration(4);
  s.chunks[0].weights[0] = 123.0f;
  Write(s);
  EXPECT_EQ(Names(), std::vector<std::string>{"checkpoint-000000000004.phub"});
  EXPECT_EQ(ReadCheckpoint(Path(Names()[0]))->chunks[0].weights[0], 123.0f);
}

TEST_F(CheckpointFileTest, KeepBelowTwoIsRefused) {
  StatusOr<std::string> path = WriteCheckpoint(dir_, AtIteration(1), 1);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(path.status(), "keep is 1"));
  EXPECT_TRUE(Names().empty());
}

TEST_F(CheckpointFileTest, MissingDirectoryNamesSyscallPathAndErrno) {
  StatusOr<std::string> path = WriteCheckpoint(dir_ + "/nope", AtIteration(1));
  EXPECT_EQ(path.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(path.status(), "mkstemps('" + dir_ + "/nope/checkpoint-"));
  EXPECT_TRUE(MessageHas(path.status(), "No such file or directory"));
}

TEST_F(CheckpointFileTest, LeftoverTemporaryFileIsIgnoredThenRemoved) {
  Write(AtIteration(3));
  const std::string tmp = "checkpoint-000000000009.phub.Ab12Cd.tmp";  // a crash mid-write
  WriteBytes(Path(tmp), EncodeCheckpoint(AtIteration(9)).substr(0, 100));
  StatusOr<LoadedCheckpoint> loaded = LoadNewestCheckpoint(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, Path("checkpoint-000000000003.phub"));
  EXPECT_TRUE(loaded->refused.empty());
  Write(AtIteration(4));
  EXPECT_FALSE(fs::exists(Path(tmp)));
}

TEST_F(CheckpointFileTest, OneFlippedByteAnywhereIsRefused) {
  const std::string good = EncodeCheckpoint(MakeSnapshot(OptimizerKind::kAdam, true));
  ASSERT_TRUE(DecodeCheckpoint(good, "x").ok());
  for (std::size_t i = 0; i < good.size(); ++i) {
    for (unsigned char mask : {0x01, 0x80}) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ mask);
      StatusOr<JobSnapshot> read = DecodeCheckpoint(bad, "x");
      ASSERT_FALSE(read.ok()) << "byte " << i << " ^ " << int{mask} << " was accepted";
      EXPECT_TRUE(MessageHas(read.status(), "checkpoint 'x'")) << "byte " << i;
    }
  }
}

TEST_F(CheckpointFileTest, CorruptionIsReportedWithItsRegion) {
  const std::string path = Write(MakeSnapshot(OptimizerKind::kAdam, true));
  const std::string good = ReadBytes(path);
  const Layout l = LayoutOf(good);
  const std::size_t r = l.record[2];
  const std::size_t data = r + 24;
  const std::size_t quarter = l.arrays[2] / 4;  // weights, previous, m, s
  const std::size_t name = good.find("fc.weight");
  struct Case {
    std::size_t at;
    std::string says;
  };
  const std::vector<Case> cases = {
      {0, "not a PHub checkpoint"},
      {8, "format version"},
      {16, "checksum of the header is"},
      {name + 1, "checksum of the header is"},
      {l.header_end - 1, "checksum of the header is"},
      {r, "checksum of the record header of chunk 2"},
      {r + 9, "checksum of the record header of chunk 2"},
      {data + 3, "checksum of chunk 2 is"},
      {data + quarter + 5, "checksum of chunk 2 is"},
      {data + 3 * quarter + 5, "checksum of chunk 2 is"},
      {data + l.arrays[2] + 1, "checksum of chunk 2 is"},
      {good.size() - 17, "checksum of the trailer"},
      {good.size() - 9, "checksum of the trailer"},
      {good.size() - 1, "checksum of the trailer"},
  };
  for (const Case& c : cases) {
    std::string bad = good;
    bad[c.at] = static_cast<char>(bad[c.at] ^ 0x20);
    WriteBytes(path, bad);
    StatusOr<JobSnapshot> read = ReadCheckpoint(path);
    EXPECT_TRUE(MessageHas(read.status(), c.says)) << "flipped byte " << c.at;
    EXPECT_TRUE(MessageHas(read.status(), "'" + path + "'")) << "flipped byte " << c.at;
    if (c.says.starts_with("checksum")) {
      EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
      EXPECT_TRUE(MessageHas(read.status(), "the file is corrupt"));
    }
  }
}

TEST_F(CheckpointFileTest, TruncationAtAnyOffsetIsRefused) {
  const std::string good = EncodeCheckpoint(MakeSnapshot(OptimizerKind::kMomentum, true));
  for (std::size_t size = 0; size < good.size(); ++size) {
    StatusOr<JobSnapshot> read = DecodeCheckpoint(std::string_view(good).substr(0, size), "x");
    ASSERT_TRUE(MessageHas(read.status(), "truncated")) << "cut at " << size;
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  }
  // The same through a real file, cut shorter and shorter.
  const std::string path = Write(MakeSnapshot(OptimizerKind::kMomentum, true));
  for (std::size_t size : {good.size() - 1, good.size() / 2, std::size_t{30}, std::size_t{3}}) {
    fs::resize_file(path, size);
    StatusOr<JobSnapshot> read = ReadCheckpoint(path);
    EXPECT_TRUE(MessageHas(read.status(), "is truncated")) << "cut at " << size;
    EXPECT_TRUE(MessageHas(read.status(), "file has " + std::to_string(size))) << size;
  }
}

TEST_F(CheckpointFileTest, ExtraBytesAfterTheLastChunkAreRefused) {
  const std::string good = EncodeCheckpoint(MakeSnapshot(OptimizerKind::kSgd, false));
  StatusOr<JobSnapshot> read = DecodeCheckpoint(good + std::string(8, '\0'), "x");
  EXPECT_TRUE(MessageHas(read.status(), "8 unexpected bytes after the last chunk"));
}

TEST_F(CheckpointFileTest, HugeClaimsAreRefusedWithoutAllocating) {
  JobSnapshot small;
  small.tensors = {{"huge", 1'000'000'000'000}};  // 10^12 floats: 4 TB
  small.chunk_bytes = 1 << 22;
  small.world_size = 2;
  std::string bytes = EncodeCheckpoint(small);
  const std::uint32_t chunks = 1'000'000'000'000 / (1 << 20) + 1;  // the spec's, to get past that
  std::memcpy(bytes.data() + LayoutOf(bytes).header_end - 8, &chunks, 4);
  ResealHeader(bytes);
  const std::string path = Path("checkpoint-000000000000.phub");
  WriteBytes(path, bytes);

  g_largest = 0;
  g_tracking = true;
  StatusOr<JobSnapshot> read = ReadCheckpoint(path);
  g_tracking = false;
  EXPECT_TRUE(MessageHas(read.status(), "truncated"));
  EXPECT_TRUE(MessageHas(read.status(), "expected at least 4000026703004 bytes, file has 104"));
  EXPECT_LT(g_largest.load(), std::size_t{1} << 20) << "allocated what the file merely claims";

  // A header length, a tensor count and a name length past the file: refused, not allocated.
  std::string claims = EncodeCheckpoint(MakeSnapshot(OptimizerKind::kSgd, false));
  const std::uint32_t huge = 0xfffffff0;
  std::string long_header = claims;
  std::memcpy(long_header.data() + 12, &huge, 4);
  std::string many_tensors = claims;
  std::memcpy(many_tensors.data() + 16 + 40, &huge, 4);
  ResealHeader(many_tensors);
  std::string long_name = claims;
  std::memcpy(long_name.data() + 16 + 44 + 8, &huge, 4);
  ResealHeader(long_name);
  for (const std::string* bad : {&long_header, &many_tensors, &long_name}) {
    g_largest = 0;
    g_tracking = true;
    StatusOr<JobSnapshot> r = DecodeCheckpoint(*bad, "x");
    g_tracking = false;
    EXPECT_FALSE(r.ok());
    EXPECT_LT(g_largest.load(), std::size_t{1} << 20) << r.status();
  }
}

TEST_F(CheckpointFileTest, ChunkLayoutDisagreeingWithTheTensorTableIsRefused) {
  // A chunk of the wrong length, chunks out of order, a chunk missing.
  JobSnapshot shorter = MakeSnapshot(OptimizerKind::kSgd, false);
  shorter.chunks[1].weights.pop_back();
  JobSnapshot swapped = MakeSnapshot(OptimizerKind::kSgd, false);
  std::swap(swapped.chunks[3], swapped.chunks[4]);
  JobSnapshot missing = MakeSnapshot(OptimizerKind::kSgd, false);
  missing.chunks.pop_back();
  for (const JobSnapshot* s : {&shorter, &swapped, &missing}) {
    StatusOr<JobSnapshot> read = DecodeCheckpoint(EncodeCheckpoint(*s), "x");
    EXPECT_TRUE(MessageHas(read.status(), "the chunk layout disagrees with the tensor table"));
    EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
    // The writer refuses to write it in the first place.
    EXPECT_EQ(WriteCheckpoint(dir_, *s).status().code(), absl::StatusCode::kInvalidArgument);
  }
  EXPECT_TRUE(MessageHas(DecodeCheckpoint(EncodeCheckpoint(shorter), "x").status(),
                         "makes chunk 1 of 44 elements"));
  // State arrays that are not the optimizer's.
  JobSnapshot adam_as_sgd = MakeSnapshot(OptimizerKind::kAdam, false);
  adam_as_sgd.optimizer.kind = OptimizerKind::kSgd;
  EXPECT_TRUE(MessageHas(DecodeCheckpoint(EncodeCheckpoint(adam_as_sgd), "x").status(),
                         "chunk 0 has 2 optimizer state arrays"));
  EXPECT_TRUE(Names().empty());
}

TEST_F(CheckpointFileTest, InvalidOptimizerIsRefused) {
  JobSnapshot s = MakeSnapshot(OptimizerKind::kMomentum, false);
  s.optimizer.momentum = 1.5f;
  EXPECT_TRUE(MessageHas(DecodeCheckpoint(EncodeCheckpoint(s), "x").status(), "momentum=1.5"));
}

TEST_F(CheckpointFileTest, LoadNewestFallsBackFromACorruptNewest) {
  Write(AtIteration(1));
  const std::string newest = Write(AtIteration(2));
  std::string bytes = ReadBytes(newest);
  bytes[bytes.size() / 2] ^= 0x04;
  WriteBytes(newest, bytes);
  StatusOr<LoadedCheckpoint> loaded = LoadNewestCheckpoint(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, Path("checkpoint-000000000001.phub"));
  ExpectSame(loaded->snapshot, AtIteration(1));
  ASSERT_EQ(loaded->refused.size(), 1u);
  EXPECT_EQ(loaded->refused[0].rfind(newest + ": ", 0), 0u) << loaded->refused[0];
  EXPECT_NE(loaded->refused[0].find("corrupt"), std::string::npos) << loaded->refused[0];
}

TEST_F(CheckpointFileTest, LoadNewestRefusesARenamedFile) {
  Write(AtIteration(1));
  fs::copy_file(Path("checkpoint-000000000001.phub"), Path("checkpoint-000000000007.phub"));
  StatusOr<LoadedCheckpoint> loaded = LoadNewestCheckpoint(dir_);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->path, Path("checkpoint-000000000001.phub"));
  ASSERT_EQ(loaded->refused.size(), 1u);
  EXPECT_NE(loaded->refused[0].find("holds iteration 1 but is named for 7"), std::string::npos);
}

TEST_F(CheckpointFileTest, LoadNewestWithEveryFileRefusedIsDataLoss) {
  WriteBytes(Path("checkpoint-000000000001.phub"), "PHUBCKPT");
  WriteBytes(Path("checkpoint-000000000002.phub"), "garbage!");
  StatusOr<LoadedCheckpoint> loaded = LoadNewestCheckpoint(dir_);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(MessageHas(loaded.status(), Path("checkpoint-000000000001.phub") + ": "));
  EXPECT_TRUE(MessageHas(loaded.status(), "is truncated"));
  EXPECT_TRUE(MessageHas(loaded.status(), Path("checkpoint-000000000002.phub") + ": "));
  EXPECT_TRUE(MessageHas(loaded.status(), "not a PHub checkpoint"));
}

TEST_F(CheckpointFileTest, LoadNewestWithoutCheckpointsIsNotFound) {
  EXPECT_EQ(LoadNewestCheckpoint(dir_).status().code(), absl::StatusCode::kNotFound);
  WriteBytes(Path("checkpoint-12.phub"), "not the canonical name");
  WriteBytes(Path("notes.txt"), "");
  StatusOr<LoadedCheckpoint> loaded = LoadNewestCheckpoint(dir_);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(loaded.status(), dir_));
  EXPECT_EQ(LoadNewestCheckpoint(dir_ + "/nope").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace phub::server
