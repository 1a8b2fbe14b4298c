// The checkpoint file format's constants and the pieces its encoder (checkpoint_encode.cc),
// decoder (checkpoint_decode.cc) and file I/O (checkpoint_file.cc) share. Internal to
// phub/server: the layout itself is documented in checkpoint_file.h.
#pragma once

#include <zlib.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <limits>
#include <string>

#include "phub/common/status.h"
#include "phub/server/checkpoint/checkpoint_file.h"

namespace phub::server::detail {

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian and copied with memcpy: a big-endian port "
              "must byte-swap in the encoder and the decoder");

inline constexpr char kMagic[8] = {'P', 'H', 'U', 'B', 'C', 'K', 'P', 'T'};
inline constexpr char kTrailerMagic[8] = {'P', 'H', 'U', 'B', 'T', 'A', 'I', 'L'};
// Version 2 adds batches_before; a snapshot without it is written as version 1, so that what a
// reader accepts re-encodes to the same bytes whichever version it was.
inline constexpr std::uint32_t kFormatVersion = 2;
inline constexpr std::uint64_t kPrefixBytes = 16;        // magic, version, body bytes
inline constexpr std::uint64_t kBodyFixedBytes = 48;     // every version 1 body field but the tensors'
inline constexpr std::uint64_t kBatchesBeforeBytes = 8;  // version 2's
inline constexpr std::uint64_t kTensorFixedBytes = 12;   // elements, name length
inline constexpr std::uint64_t kRecordHeaderBytes = 24;  // 20 bytes + their crc32
inline constexpr std::uint64_t kTrailerBytes = 20;

// The format's optimizer codes, fixed here so that reordering the enum cannot change a file.
inline constexpr kernels::OptimizerKind kKindByCode[] = {
    kernels::OptimizerKind::kSgd, kernels::OptimizerKind::kMomentum,
    kernels::OptimizerKind::kNesterov, kernels::OptimizerKind::kAdam,
    kernels::OptimizerKind::kAverage};

inline std::uint32_t KindCode(kernels::OptimizerKind kind) {
  for (std::uint32_t i = 0; i < std::size(kKindByCode); ++i) {
    if (kKindByCode[i] == kind) return i;
  }
  return std::numeric_limits<std::uint32_t>::max();  // ValidateSnapshot refuses such a kind
}

inline std::uint32_t Crc(std::uint32_t crc, const void* data, std::size_t bytes) {
  return static_cast<std::uint32_t>(crc32_z(crc, static_cast<const Bytef*>(data), bytes));
}
inline std::uint32_t Crc(const void* data, std::size_t bytes) { return Crc(0, data, bytes); }

inline std::uint32_t VersionOf(const JobSnapshot& s) { return s.batches_before ? 2 : 1; }

inline std::uint64_t HeaderBodyBytes(const JobSnapshot& s) {
  std::uint64_t bytes = kBodyFixedBytes + (s.batches_before ? kBatchesBeforeBytes : 0);
  for (const auto& t : s.tensors) bytes += kTensorFixedBytes + t.name.size();
  return bytes;
}

// A chunk record of `arrays` arrays of `elements` floats: header, arrays, checksum.
inline std::uint64_t RecordBytes(std::uint64_t elements, std::uint64_t arrays) {
  return kRecordHeaderBytes + elements * sizeof(float) * arrays + 4;
}

// Takes the file's bytes in order: small fields gathered into writes of about 1 MiB, arrays of
// 64 KiB or more passed as they are (so a file is written in few, large writes).
using CheckpointSink = std::function<Status(const void* data, std::size_t bytes)>;
// Stops at the sink's first error and returns it. Does not validate `snapshot`.
Status EncodeCheckpointTo(const JobSnapshot& snapshot, const CheckpointSink& sink);

// Copies `bytes` from `offset` into `data`; only ever asked for bytes within the `size` given to
// DecodeCheckpointFrom.
using CheckpointSource = std::function<Status(std::uint64_t offset, void* data, std::size_t bytes)>;
// ReadCheckpoint's checks on any source; `name` stands for it in messages.
StatusOr<JobSnapshot> DecodeCheckpointFrom(std::uint64_t size, const CheckpointSource& read,
                                           const std::string& name);

}  // namespace phub::server::detail
