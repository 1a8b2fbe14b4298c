// How a verbs message says which path it took: the 32-bit immediate of its RDMA WRITE WITH
// IMMEDIATE is 2 bits of kind and 30 bits of index (landing zone, staged slot) or count
// (credits). Shared by VerbsConnection's set-up (which bounds indices by it) and data path.
#pragma once

#include <cstddef>
#include <cstdint>

namespace phub::transport::verbs {

constexpr std::uint32_t kKindShift = 30;
constexpr std::uint32_t kIndexMask = (1u << kKindShift) - 1;
enum ImmediateKind : std::uint32_t { kDirect = 0, kStaged = 1, kCredit = 2 };

constexpr std::uint32_t Immediate(ImmediateKind kind, std::uint32_t index) {
  return (static_cast<std::uint32_t>(kind) << kKindShift) | index;
}

// Staged slots and send buffers are cache-line multiples.
constexpr std::size_t RoundUp64(std::size_t bytes) { return (bytes + 63) / 64 * 64; }

}  // namespace phub::transport::verbs
