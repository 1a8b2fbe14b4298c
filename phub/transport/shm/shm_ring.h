// The memory two processes on one host share for one shm connection, and the two byte rings in
// it (one per direction). The acceptor creates it (a sealed memfd, shm_setup.h); both map it.
//
//   page 0: the control words: per ring its producer's position (head), its consumer's (tail)
//           and the producer's end flag; per side a "bell me" flag (shm_connection.cc)
//   then:   ring 0's bytes (acceptor -> dialer), ring 1's bytes (dialer -> acceptor)
//
// A ring is a byte stream, as a TCP stream is: the sender copies header + payload in, the
// receiver copies them out into the slot its handler named. Positions count bytes since the
// start and only grow; each side keeps its own position in its own memory and only publishes
// it, and reads the peer's with a check (the peer may write anything into this page at any
// time: a position that would put more bytes in the ring than it holds, or run backwards, is
// refused). Neither class is thread-safe: each belongs to its connection's loop.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "phub/common/status.h"

namespace phub::transport::shm {

inline constexpr std::size_t kControlBytes = 4096;

// The control page's words. Each sits on its own cache line: a producer's and a consumer's
// stores to neighbours would otherwise bounce one line between two cores at every copy.
struct ControlPage {
  struct alignas(64) Word {
    std::uint64_t value;
  };
  struct RingWords {
    Word head;   // producer: bytes published
    Word tail;   // consumer: bytes taken
    Word ended;  // producer: 1 once no byte follows head (its side of a Finish)
  };
  RingWords ring[2];
  Word waiting[2];  // side k: 1 while it has nothing to do and wants its bell rung
};
static_assert(sizeof(ControlPage) <= kControlBytes);

// Which ring carries which direction, and whose bell is whose.
enum class Side : int { kAcceptor = 0, kDialer = 1 };
inline int SendRingOf(Side side) { return side == Side::kAcceptor ? 0 : 1; }
inline int ReceiveRingOf(Side side) { return 1 - SendRingOf(side); }
inline int PeerOf(Side side) { return 1 - static_cast<int>(side); }

// The bytes of a ring in this process's mapping; `bytes.size()` is a power of two.
struct RingMemory {
  std::uint64_t* head;
  std::uint64_t* tail;
  std::uint64_t* ended;
  std::span<std::byte> bytes;
};

// Ring `ring` (0 or 1) of a mapping of kControlBytes + 2 * ring_bytes.
RingMemory RingIn(std::span<std::byte> mapping, std::size_t ring_bytes, int ring);

// This side's end of the ring it sends on.
class RingWriter {
 public:
  explicit RingWriter(RingMemory memory) : memory_(memory) {}

  // Bytes that fit now, from the consumer's published position; DataLoss if that position is
  // not one a consumer of this ring could have published.
  StatusOr<std::size_t> Free() const;
  // Copies min(bytes, Free()) in (call Free() first) and returns how many; unpublished.
  std::size_t Write(std::span<const std::byte> bytes, std::size_t free);
  // Makes everything written so far visible to the consumer.
  void Publish();
  // No byte follows what is published (a Finish). Publishes first.
  void End();
  // Every published byte was taken (as far as the consumer says).
  bool Drained() const;

 private:
  RingMemory memory_;
  std::uint64_t head_ = 0;
};

// This side's end of the ring it receives on.
class RingReader {
 public:
  explicit RingReader(RingMemory memory) : memory_(memory) {}

  // Bytes published and not yet taken; DataLoss if the producer's position is impossible.
  StatusOr<std::size_t> Available() const;
  // Copies min(out.size(), available) out (call Available() first); returns how many.
  std::size_t Read(std::span<std::byte> out, std::size_t available);
  // Drops up to `count` of `available` bytes; returns how many.
  std::size_t Skip(std::size_t count, std::size_t available);
  // Tells the producer the room taken so far is free again.
  void Publish();
  // The producer said no byte follows (its end flag); meaningful once Available() is 0.
  bool PeerEnded() const;

 private:
  RingMemory memory_;
  std::uint64_t tail_ = 0;
};

}  // namespace phub::transport::shm
