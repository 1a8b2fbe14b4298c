// phubd's checkpoint files: everything a job needs to resume (its spec, every chunk's weights,
// previous weights and optimizer state) in one file per moment, written atomically and read back
// without trusting a byte of it.
//
// File format, version 2 (phubd reads 1 too). Integers little-endian, floats IEEE-754 binary32
// little-endian.
//
//   header   "PHUBCKPT" | u32 version (1 or 2) | u32 body bytes B (<= kMaxCheckpointHeaderBytes) |
//            body: u64 chunk_bytes, u32 world_size, u32 optimizer kind (0 sgd, 1 momentum,
//                  2 nesterov, 3 adam), f32 lr, momentum, weight_decay, beta1, beta2, eps,
//                  [version 2: u64 batches_before,]
//                  u32 tensors T, T x {u64 elements, u32 name bytes n, n bytes of name},
//                  u32 chunks C |
//            u32 crc32 of everything before it (magic included)
//   C chunk records, in chunk-id order, each:
//            24-byte record header: u32 id, u32 elements E, u64 iteration, u8 has_previous (0|1),
//              u8 state arrays S, u16 zero, u32 crc32 of the 20 bytes before it |
//            4*E*(1 + has_previous + S) bytes: weights, previous (if kept), state[0..S) |
//            u32 crc32 of those arrays
//   trailer  "PHUBTAIL" | u64 bytes of the whole file | u32 crc32 of the 16 bytes before it
//
// The record header has its own checksum, so its fields are known good before they are checked
// against the spec, and before the arrays they announce are read or allocated. Nothing has slack:
// every byte is checked, so a file is accepted only if EncodeCheckpoint gives back the same bytes
// (tests/fuzz/checkpoint_fuzzer.cc holds the reader to that).
//
// Files are named checkpoint-<iteration>.phub, the iteration being the smallest of the chunks'
// (chunks of one job may be one aggregation apart), zero-padded to 12 digits; only that exact
// name counts as a checkpoint, so a temporary file left by a crash (checkpoint-<...>.tmp) is
// never read. Thread-compatible; one writer per directory at a time.
//
// Code: checkpoint_encode.cc and checkpoint_decode.cc (the format, no I/O; constants in
// checkpoint_format.h), checkpoint_file.cc (files and directories).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "phub/common/status.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/keys/key_table.h"

namespace phub::server {

// One chunk's server-side state at a moment between two of its aggregations.
struct ChunkSnapshot {
  std::uint32_t chunk = 0;      // chunk id in the job's key table
  std::uint64_t iteration = 0;  // aggregations completed
  std::vector<float> weights;   // after `iteration` aggregations (chunk.elements floats)
  std::vector<float> previous;  // after iteration-1 (same length), or empty when not kept
                                // (always empty at iteration 0)
  // Optimizer state arrays (kernels::StateArrays(kind)), each chunk.elements.
  std::vector<std::vector<float>> state;
};

// Everything needed to resume a job: its spec and every chunk.
struct JobSnapshot {
  std::vector<keys::TensorSpec> tensors;  // phub/keys/key_table.h: {name, elements}
  std::uint64_t chunk_bytes = 0;
  std::uint32_t world_size = 0;
  // phub/kernels/aggregate_and_step.h. With a schedule (JobSpec::per_iteration_values), its
  // values are those the job stepped the snapshot's iteration with, where the job knew them.
  kernels::OptimizerConfig optimizer;
  // The batches the job took before the iteration after the snapshot's (an elastic job's
  // MemberSchedule::MemberIterationsBefore; a fixed job's iterations x world size): a resumed
  // elastic job's data goes on from there. Written as format version 2; absent (version 1, or
  // not known) the resumed job counts from 0.
  std::optional<std::uint64_t> batches_before;
  std::vector<ChunkSnapshot> chunks;   // every chunk of keys::KeyTable::Build(tensors, chunk_bytes,
                                       // any cores), in chunk-id order
};

// The largest header section (the tensor table with its names) a reader accepts: far above any
// model's (a few thousand tensors), far below what would hurt to allocate.
inline constexpr std::uint32_t kMaxCheckpointHeaderBytes = 64u << 20;
// WriteCheckpoint's default and least `keep`: the newest file and the one before it, so a crash
// while writing (or a newest file found corrupt) still leaves a whole one.
inline constexpr int kDefaultCheckpointsKept = 2;

// Writes `snapshot` into directory `dir` as checkpoint file "checkpoint-<min iteration, 12 digits
// zero-padded>.phub" atomically: temporary file in the same dir, write, fsync, rename, fsync of the
// directory; then deletes older checkpoint files so that exactly `keep` (>= 2, default 2) newest
// whole ones remain (the previous one is kept until the new one is whole). Returns the final path.
// Errors name the path and the syscall and errno text.
//
// Details: InvalidArgument (nothing written) when `keep` < 2 or ValidateSnapshot refuses the
// snapshot. The directory must exist. A file of the same iteration is replaced. "Older" means a
// smaller iteration: files with a larger one than this snapshot's (say, a corrupt newest that a
// resumed job fell back from) are left alone, with a warning, and never count among the kept;
// the file just written is never deleted. Temporary files of earlier, crashed writes are
// removed. A failure to delete an old file is logged, not returned: the new one is whole.
// Blocks for the whole write (fsync included): call it off the data path.
StatusOr<std::string> WriteCheckpoint(const std::string& dir, const JobSnapshot& snapshot,
                                      int keep = kDefaultCheckpointsKept);

// Reads and fully validates one file. Never trusts the file: every size is checked against the
// file's real size and against the spec before allocating (a file that claims 10^12 floats is
// refused, not allocated); checksums (zlib crc32) over the header and over each chunk record; the
// chunk layout must be exactly what KeyTable::Build(tensors, chunk_bytes, 1) produces (ids, element
// counts); optimizer validated with kernels::ValidateStepValues (lr may be 0); state array count
// must equal kernels::StateArrays(kind). Error messages name the file, what is wrong (e.g. "checksum of chunk
// 17 is 0x.. but the data hash to 0x..: the file is corrupt", "truncated: ... expected N bytes,
// file has M"), and what to do.
//
// Codes: NotFound (no such file), another errno-derived code when it cannot be opened or read,
// Unimplemented (a format version this phubd does not read), DataLoss (anything wrong inside).
StatusOr<JobSnapshot> ReadCheckpoint(const std::string& path);

struct LoadedCheckpoint {
  std::string path;
  JobSnapshot snapshot;
  std::vector<std::string> refused;  // "path: why" for each newer file that was refused
};

// The newest checkpoint in `dir` that reads back whole; newer ones that fail are skipped, each
// logged (spdlog::error) and listed in `refused`. NotFound when dir has no checkpoint files;
// DataLoss when every one is refused (message lists each file and why). "Newest" is by the
// iteration in the name; a file whose content's iteration differs from its name's is refused too
// (it was renamed, and would be tried in the wrong order). NotFound also when `dir` does not exist.
StatusOr<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& dir);

// ---- Pieces of the above, for phubd's callers, tests and the fuzzer ----

// The iteration a snapshot's file is named for: the smallest of its chunks' (0 without chunks).
std::uint64_t CheckpointIteration(const JobSnapshot& snapshot);
// "checkpoint-000000000042.phub" (more digits past 10^12 - 1).
std::string CheckpointFileName(std::uint64_t iteration);
// The size of the file WriteCheckpoint writes for `snapshot`.
std::uint64_t CheckpointBytes(const JobSnapshot& snapshot);
// InvalidArgument naming the first thing that makes `snapshot` unfit to resume from: a bad
// optimizer or world size, a spec KeyTable::Build refuses, a chunk missing, out of order or of
// the wrong length, state arrays not StateArrays(kind), previous weights at iteration 0, a header
// over kMaxCheckpointHeaderBytes.
Status ValidateSnapshot(const JobSnapshot& snapshot);
// The exact bytes WriteCheckpoint writes, without validating the snapshot (tests and fuzz seeds
// build files no writer would).
// REQUIRES: counts and lengths fit the format's fields (tensors, chunks, elements: uint32).
std::string EncodeCheckpoint(const JobSnapshot& snapshot);
// ReadCheckpoint on bytes in memory; `name` stands for the file in messages.
StatusOr<JobSnapshot> DecodeCheckpoint(std::string_view bytes, const std::string& name);

}  // namespace phub::server
