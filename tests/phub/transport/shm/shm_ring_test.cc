// The shm rings against a plain reference (a std::deque of bytes) on random traffic, and what a
// peer that rewrites the shared positions or sends a forged hello gets: a refusal naming what
// was wrong, never a read or write out of the ring.
#include "phub/transport/shm/shm_ring.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <vector>

#include "phub/transport/shm/shm_setup.h"

namespace phub::transport::shm {
namespace {

constexpr std::size_t kRing = 64 * 1024;

struct Mapping {
  std::vector<std::byte> bytes = std::vector<std::byte>(kControlBytes + 2 * kRing);
  std::span<std::byte> span() { return bytes; }
};

TEST(ShmRingTest, RandomWritesAndReadsAcrossTheWrapMatchAPlainQueue) {
  Mapping mapping;
  RingWriter writer(RingIn(mapping.span(), kRing, 0));
  RingReader reader(RingIn(mapping.span(), kRing, 0));
  std::deque<std::byte> reference;
  std::mt19937 random(7);
  std::uint8_t next = 0;
  std::size_t moved = 0;
  for (int step = 0; step < 4000; ++step) {
    if (random() % 2 == 0) {
      std::vector<std::byte> bytes(random() % (kRing / 3));
      for (std::byte& b : bytes) b = std::byte(next++);
      StatusOr<std::size_t> free = writer.Free();
      ASSERT_TRUE(free.ok()) << free.status();
      ASSERT_EQ(*free, kRing - reference.size());
      const std::size_t n = writer.Write(bytes, *free);
      ASSERT_EQ(n, std::min(bytes.size(), *free));
      reference.insert(reference.end(), bytes.begin(), bytes.begin() + n);
      next = static_cast<std::uint8_t>(next - (bytes.size() - n));  // the unwritten come again
      writer.Publish();
    } else {
      StatusOr<std::size_t> available = reader.Available();
      ASSERT_TRUE(available.ok()) << available.status();
      ASSERT_EQ(*available, reference.size());
      std::vector<std::byte> out(random() % (kRing / 2));
      const std::size_t n = reader.Read(out, *available);
      ASSERT_EQ(n, std::min(out.size(), reference.size()));
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(out[i], reference.front()) << "byte " << moved + i;
        reference.pop_front();
      }
      moved += n;
      reader.Publish();
    }
  }
  EXPECT_GT(moved, 10 * kRing);  // the positions wrapped many times
}

TEST(ShmRingTest, TheEndFlagComesAfterEverythingPublished) {
  Mapping mapping;
  RingWriter writer(RingIn(mapping.span(), kRing, 1));
  RingReader reader(RingIn(mapping.span(), kRing, 1));
  const std::vector<std::byte> bytes(100, std::byte{1});
  writer.Write(bytes, *writer.Free());
  EXPECT_FALSE(reader.PeerEnded());
  writer.End();
  EXPECT_TRUE(reader.PeerEnded());
  EXPECT_EQ(*reader.Available(), 100u);
  EXPECT_FALSE(writer.Drained());
  std::vector<std::byte> out(100);
  reader.Read(out, 100);
  reader.Publish();
  EXPECT_TRUE(writer.Drained());
}

// The peer owns the other end's position: one that puts more in the ring than it holds, or
// runs backwards, is refused before any byte is copied.
TEST(ShmRingTest, AnImpossibleProducerPositionIsDataLoss) {
  Mapping mapping;
  RingMemory memory = RingIn(mapping.span(), kRing, 0);
  RingReader reader(memory);
  for (std::uint64_t forged : {std::uint64_t{kRing + 1}, ~std::uint64_t{0}, std::uint64_t{1} << 40}) {
    *memory.head = forged;
    StatusOr<std::size_t> available = reader.Available();
    ASSERT_FALSE(available.ok()) << forged;
    EXPECT_EQ(available.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(available.status().message().find("corrupted the shared memory"), std::string::npos);
  }
  *memory.head = kRing;  // exactly full is possible
  EXPECT_EQ(*reader.Available(), kRing);
}

TEST(ShmRingTest, AnImpossibleConsumerPositionIsDataLoss) {
  Mapping mapping;
  RingMemory memory = RingIn(mapping.span(), kRing, 1);
  RingWriter writer(memory);
  const std::vector<std::byte> bytes(1000);
  writer.Write(bytes, *writer.Free());
  writer.Publish();
  for (std::uint64_t forged : {std::uint64_t{1001}, ~std::uint64_t{0}}) {
    *memory.tail = forged;  // ahead of what was written
    StatusOr<std::size_t> free = writer.Free();
    ASSERT_FALSE(free.ok()) << forged;
    EXPECT_EQ(free.status().code(), absl::StatusCode::kDataLoss);
  }
  *memory.tail = 1000;
  EXPECT_EQ(*writer.Free(), kRing);
}

std::vector<std::byte> Hello(std::uint32_t magic, std::uint16_t version, std::uint64_t ring) {
  std::vector<std::byte> hello(kHelloBytes);
  std::memcpy(hello.data(), &magic, 4);
  std::memcpy(hello.data() + 4, &version, 2);
  std::memcpy(hello.data() + 8, &ring, 8);
  return hello;
}

TEST(ShmHelloTest, AGoodHelloGivesItsRingSize) {
  StatusOr<std::size_t> ring = DecodeHello(Hello(kShmMagic, kShmVersion, 1 << 20));
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(*ring, std::size_t{1} << 20);
}

TEST(ShmHelloTest, EachBadFieldIsNamed) {
  struct Case {
    std::vector<std::byte> hello;
    const char* names;
  };
  std::vector<Case> cases = {
      {Hello(0x12345678, kShmVersion, 1 << 20), "magic"},
      {Hello(kShmMagic, 9, 1 << 20), "version 9"},
      {Hello(kShmMagic, kShmVersion, (1 << 20) + 1), "power of two"},
      {Hello(kShmMagic, kShmVersion, kMaxRingBytes * 2), "power of two"},
      {Hello(kShmMagic, kShmVersion, kMinRingBytes / 2), "power of two"},
      {std::vector<std::byte>(kHelloBytes - 1), "bytes, not"},
  };
  for (const Case& c : cases) {
    StatusOr<std::size_t> ring = DecodeHello(c.hello);
    ASSERT_FALSE(ring.ok()) << c.names;
    EXPECT_EQ(ring.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(ring.status().message().find(c.names), std::string::npos) << ring.status();
  }
}

}  // namespace
}  // namespace phub::transport::shm
