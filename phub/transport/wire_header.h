// The data-plane header: 32 bytes, little-endian, in front of every message on a data
// connection; the payload (raw float32 for chunks) follows with no framing of its own.
// Byte-by-byte layout and the meaning of each op: docs/protocol.md.
//
//   0 magic u32 ("PHUB")  4 version u16  6 op u8  7 flags u8 (0)  8 worker u32  12 chunk u32
//  16 iteration u64      24 payload_bytes u32    28 reserved u32 (0)
//
// DecodeWireHeader checks every field it can check without context (magic, version, op,
// flags, reserved, payload limit); the receiver checks the rest (worker, chunk, iteration,
// payload length) against its own state.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "phub/common/status.h"

namespace phub::transport {

inline constexpr std::uint32_t kWireMagic = 0x42554850;  // bytes 'P' 'H' 'U' 'B'
inline constexpr std::size_t kWireHeaderBytes = 32;
// No single message may carry more than this (a chunk is far smaller); guards allocation and
// reads against a corrupt length.
inline constexpr std::uint32_t kMaxPayloadBytes = 1u << 30;

enum class Op : std::uint8_t {
  kPush = 1,     // worker -> core: its gradient of `chunk` for `iteration`
  kWeights = 2,  // core -> worker: the chunk's fresh weights after `iteration`
  kInit = 3,     // rank 0 -> core: initial weights of `chunk` (iteration 0)
  kAttach = 4,   // worker -> core: first message; worker = rank, chunk = core, iteration = session
  kBye = 5,      // worker -> core: clean leave; the connection closes next
  kError = 6,    // either way: payload is a UTF-8 reason; the sender closes next
};

std::string OpName(Op op);

struct WireHeader {
  Op op = Op::kPush;
  std::uint32_t worker = 0;
  std::uint32_t chunk = 0;
  std::uint64_t iteration = 0;
  std::uint32_t payload_bytes = 0;
};

using EncodedHeader = std::array<std::byte, kWireHeaderBytes>;

EncodedHeader EncodeWireHeader(const WireHeader& header);

// InvalidArgument naming the bad field and its value.
StatusOr<WireHeader> DecodeWireHeader(std::span<const std::byte, kWireHeaderBytes> bytes);

}  // namespace phub::transport
