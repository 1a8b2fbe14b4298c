// How NCCL ranks share their communicator's id (ncclUniqueId, 128 opaque bytes): rank 0
// publishes it under the key "nccl.id" of the rendezvous store (phub/rendezvous: a shared
// directory, where it is the file `<directory>/nccl.id`, or tcp://HOST:PORT served by rank 0)
// and the other ranks look it up.
//
// With a directory, a file left by an earlier job (a crash before rank 0 removed it) would be
// read as this job's id: use a fresh directory per job, as the ring does. Rank 0 removes the id
// once every rank has joined.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "phub/common/status.h"
#include "phub/rendezvous/rendezvous.h"

namespace phub::nccl {

inline constexpr std::size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES (checked in the .cc)
using UniqueIdBytes = std::array<char, kUniqueIdBytes>;
inline constexpr char kUniqueIdKey[] = "nccl.id";

Status PublishUniqueId(rendezvous::Store& store, const UniqueIdBytes& id);
// Waits up to timeout_ms for the id. DeadlineExceeded names the key and the store;
// InvalidArgument if what is there is not exactly kUniqueIdBytes long.
StatusOr<UniqueIdBytes> LookupUniqueId(rendezvous::Store& store, int timeout_ms);

}  // namespace phub::nccl
