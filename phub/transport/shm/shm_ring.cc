#include "phub/transport/shm/shm_ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::transport::shm {

namespace {

static_assert(std::atomic_ref<std::uint64_t>::is_always_lock_free,
              "the control words are shared between processes: they must be lock-free");

// Release: every byte copied before is visible to whoever reads the position with acquire.
// Sequentially consistent, as the bell's flags are (shm_connection.cc): a side that publishes
// and then reads the peer's flag, against a peer that sets its flag and then reads this
// position, must not both miss the other's store.
void Store(std::uint64_t* word, std::uint64_t value) {
  std::atomic_ref<std::uint64_t>(*word).store(value, std::memory_order_seq_cst);
}
std::uint64_t Load(std::uint64_t* word) {
  return std::atomic_ref<std::uint64_t>(*word).load(std::memory_order_seq_cst);
}

// Copies between a ring position and flat bytes, in at most two pieces (the wrap).
template <typename Copy>
void AcrossTheWrap(std::span<std::byte> ring, std::uint64_t position, std::size_t count,
                   Copy copy) {
  const std::size_t at = static_cast<std::size_t>(position & (ring.size() - 1));
  const std::size_t first = std::min(count, ring.size() - at);
  copy(ring.data() + at, 0, first);
  if (first < count) copy(ring.data(), first, count - first);
}

}  // namespace

RingMemory RingIn(std::span<std::byte> mapping, std::size_t ring_bytes, int ring) {
  auto* control = reinterpret_cast<ControlPage*>(mapping.data());
  return RingMemory{&control->ring[ring].head.value, &control->ring[ring].tail.value,
                    &control->ring[ring].ended.value,
                    mapping.subspan(kControlBytes + ring * ring_bytes, ring_bytes)};
}

StatusOr<std::size_t> RingWriter::Free() const {
  const std::uint64_t tail = Load(memory_.tail);
  // Positions start at 0 and would take decades to pass 2^64: no wrap to allow for.
  if (tail > head_ || head_ - tail > memory_.bytes.size()) {
    return absl::DataLossError(absl::StrCat(
        "the peer's read position in the shared ring (", tail, ") is past what this side wrote (",
        head_, ") or more than the ring's ", memory_.bytes.size(),
        " bytes behind it: the peer corrupted the shared memory"));
  }
  return memory_.bytes.size() - (head_ - tail);
}

std::size_t RingWriter::Write(std::span<const std::byte> bytes, std::size_t free) {
  const std::size_t count = std::min(bytes.size(), free);
  AcrossTheWrap(memory_.bytes, head_, count,
                [&](std::byte* ring, std::size_t from, std::size_t n) {
                  std::memcpy(ring, bytes.data() + from, n);
                });
  head_ += count;
  return count;
}

void RingWriter::Publish() { Store(memory_.head, head_); }

void RingWriter::End() {
  Publish();
  Store(memory_.ended, 1);
}

bool RingWriter::Drained() const { return Load(memory_.tail) == head_; }

StatusOr<std::size_t> RingReader::Available() const {
  const std::uint64_t head = Load(memory_.head);
  if (head < tail_ || head - tail_ > memory_.bytes.size()) {
    return absl::DataLossError(absl::StrCat(
        "the peer's write position in the shared ring (", head, ") is behind what this side read (",
        tail_, ") or more than the ring's ", memory_.bytes.size(),
        " bytes ahead of it: the peer corrupted the shared memory"));
  }
  return static_cast<std::size_t>(head - tail_);
}

std::size_t RingReader::Read(std::span<std::byte> out, std::size_t available) {
  const std::size_t count = std::min(out.size(), available);
  AcrossTheWrap(memory_.bytes, tail_, count,
                [&](std::byte* ring, std::size_t to, std::size_t n) {
                  std::memcpy(out.data() + to, ring, n);
                });
  tail_ += count;
  return count;
}

std::size_t RingReader::Skip(std::size_t count, std::size_t available) {
  count = std::min(count, available);
  tail_ += count;
  return count;
}

void RingReader::Publish() { Store(memory_.tail, tail_); }

bool RingReader::PeerEnded() const { return Load(memory_.ended) != 0; }

}  // namespace phub::transport::shm
