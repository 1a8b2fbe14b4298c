// What a job may ask of phubd's memory, checked before anything is allocated for it: the
// model's size claimed in a Hello is a peer's word, so it is bounded here (and by
// --max-model-bytes) rather than discovered by a failed allocation on a core.
#pragma once

#include <cstdint>
#include <optional>

#include "phub/server/admission/admission_options.h"
#include "proto/phub.pb.h"

namespace phub::server {

// Bytes of bookkeeping per chunk (its key-table entry, its state on the core, its flags),
// counted against --max-model-bytes so a tiny --chunk-bytes cannot hide a huge table.
inline constexpr std::uint64_t kChunkBookkeepingBytes = 256;

// 80 % of the machine's physical memory over the copies a job keeps of its model on the PS box
// (a slot per worker, the weights, up to two optimizer state arrays).
std::uint64_t DefaultMaxModelBytes(std::uint32_t world_size);

// The bytes a job of `hello`'s tensors costs against --max-model-bytes (model + bookkeeping),
// or nullopt if the sum overflows 64 bits.
std::optional<std::uint64_t> JobModelBytes(const proto::Hello& hello, std::uint64_t chunk_bytes);

// What a job of `hello`'s model and world size is charged against --memory-budget-bytes: its
// JobModelBytes times (world size + 3) (a slot per worker, the weights, up to two optimizer
// state arrays), or nullopt on overflow.
std::optional<std::uint64_t> JobChargeBytes(const proto::Hello& hello, std::uint64_t chunk_bytes);

// 80 % of the machine's physical memory: --memory-budget-bytes' default.
std::uint64_t DefaultMemoryBudgetBytes();

// An Error (WORLD_SIZE_MISMATCH, naming the flag) unless the world size `hello` names for its
// new job is 1 to --max-world-size (without it, to `max_connections`: one control connection
// per worker).
std::optional<proto::Error> CheckWorldSize(const proto::Hello& hello, const JobSizeLimits& limits,
                                           std::uint32_t max_connections);

// An Error (LIMIT_EXCEEDED, naming the flag) if `hello` asks for more than options.limits allow
// (its model cut in options.chunk_bytes).
std::optional<proto::Error> CheckJobLimits(const proto::Hello& hello,
                                           const AdmissionOptions& options);

}  // namespace phub::server
