// The shard fuzzer's job and input format, in one place: shard_fuzzer.cc reads it, and
// fuzz_seed_writer.cc writes seeds in it (a real ATTACH, INIT, PUSH sequence).
//
// Input: byte 0 = flags (bits 0-1 the optimizer, bit 2: phubd loaded initial weights, bits 3-4
// the wire: fp32, bf16 or fp16 pushes, bf16 both ways; bit 5: previous weights kept; bit 6: an
// elastic job), then steps. A step is an action byte, (connection << 4) | what, with what:
//   0-3  the peer's next bytes on that connection: the payload it still owes, if any; else a
//        header (below), then — when it has a payload — one byte whose bit 0 says whether the
//        payload comes now (1) or later (0), then the payload (zero-filled past the input's end)
//   4    a header (below) offered to LandingZones as the peer's ATTACH, as the verbs set-up does
//        (nullptr if it does not decode); the shard's state must not change
//   5    one byte n: up to (n & 7) + 1 of the connection's queued sends complete
//   6    the peer closes the connection
//   7    a closed connection is replaced by a fresh one (a reconnecting worker), at most 8 times
// In an elastic job an action byte with bit 3 set is a membership step instead, as phubd's
// control plane makes them (job_membership.cc), from one more byte b: b % 4 = 0 freezes the
// shard; 1 changes the members from the frozen iteration + 2 to the ranks of bits 2-3 of b (at
// least one), making joiners of those ranks that ExpectJoin admitted (bit 4: fewer than the
// minimum, held at the frozen iteration, or the next with bit 5); 2 admits rank b >> 7 as a
// joiner (ExpectJoin); 3 drops rank b >> 7.
// A header is a mode byte: below 6, the 32 raw bytes follow; otherwise op, worker, chunk,
// iteration, size and damage bytes, each mapped towards valid values (shard_fuzzer.cc,
// NextHeader), the damage byte below 4 flipping bits of one byte of the encoded header.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "phub/kernels/wire_format.h"
#include "phub/server/shard/job_spec.h"
#include "phub/transport/wire_header.h"

namespace phub::fuzz {

inline constexpr std::uint32_t kWorld = 2;
inline constexpr std::uint32_t kCores = 2;
inline constexpr keys::CoreIndex kCore = 0;  // the shard under test; some chunks are core 1's
inline constexpr std::uint64_t kSession = 0x5e55'10c0'ffee'0001;
inline constexpr std::uint64_t kChunkBytes = 16;  // 4 floats: tensors of 10, 3 and 7 -> 6 chunks
inline constexpr std::size_t kConnections = 3;
inline constexpr int kMaxReconnects = 8;
inline constexpr std::uint8_t kRawHeaderModes = 6;  // mode bytes below this: raw header
inline constexpr std::uint8_t kDamageBelow = 4;     // damage bytes below this: bits flipped

inline constexpr std::uint8_t kReceive = 0;
inline constexpr std::uint8_t kLandingZones = 4;
inline constexpr std::uint8_t kCompleteSends = 5;
inline constexpr std::uint8_t kPeerCloses = 6;
inline constexpr std::uint8_t kReconnect = 7;

// The job every run uses: the same table, session and world; `flags` as in byte 0.
std::shared_ptr<const server::JobSpec> MakeShardFuzzJob(std::uint8_t flags);

// Writes inputs in this format (for seeds): only well-formed steps.
class ShardInputWriter {
 public:
  explicit ShardInputWriter(std::uint8_t flags)
      : bytes_(1, static_cast<char>(flags)), wire_(MakeShardFuzzJob(flags)->wire.format) {}

  // A whole message on `connection`: header, then its payload (if any) at once; a PUSH's
  // rounded to the job's wire format.
  // REQUIRES: op ATTACH/BYE carry no payload; `payload` is the chunk's size for PUSH/INIT.
  void Message(std::size_t connection, transport::Op op, std::uint32_t worker, std::uint32_t chunk,
               std::uint8_t iteration, std::span<const float> payload);
  // The verbs set-up's question for a peer whose ATTACH names `worker`.
  void LandingZones(std::size_t connection, std::uint32_t worker);
  void CompleteSends(std::size_t connection, std::uint8_t n);
  void PeerCloses(std::size_t connection);
  void Reconnect(std::size_t connection);
  // Elastic jobs: a membership step, `b` as the format above says.
  void MembershipStep(std::uint8_t b) {
    Put(8);
    Put(b);
  }

  const std::string& bytes() const { return bytes_; }

 private:
  void Put(std::uint8_t byte) { bytes_.push_back(static_cast<char>(byte)); }
  // `size`: the size byte (0: no payload, 1: the chunk's size, 2: a push's in the wire format).
  void Header(transport::Op op, std::uint32_t worker, std::uint32_t chunk, std::uint8_t iteration,
              std::uint8_t size);
  void Action(std::size_t connection, std::uint8_t what) {
    Put(static_cast<std::uint8_t>(connection << 4 | what));
  }

  std::string bytes_;
  kernels::WireFormat wire_;
};

}  // namespace phub::fuzz
