// How NCCL ranks share their communicator's id (ncclUniqueId, 128 opaque bytes): rank 0 writes
// it to `<directory>/nccl.id` and the others wait for that file — the same directory
// rendezvous as phub::ring::FileRendezvous (a temp dir on one box, a shared filesystem on a
// cluster) and the same rule: write to a temporary name, then rename, so a reader sees the
// whole id or no file. FileRendezvous itself stores text "host port" lines; an id is binary.
//
// A file left in the directory by an earlier job (a crash before rank 0 removed it) would be
// read as this job's id: use a fresh directory per job, as the ring does. Stateless apart from
// the path; safe to use from several threads.
#pragma once

#include <array>
#include <cstddef>
#include <string>

#include "phub/common/status.h"

namespace phub::nccl {

inline constexpr std::size_t kUniqueIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES (checked in the .cc)
using UniqueIdBytes = std::array<char, kUniqueIdBytes>;

class UniqueIdFile {
 public:
  explicit UniqueIdFile(const std::string& directory);

  // Atomically creates (or replaces) the file.
  Status Publish(const UniqueIdBytes& id) const;
  // Waits up to timeout_ms for the file. DeadlineExceeded names the file it waited for;
  // InvalidArgument if the file is not exactly kUniqueIdBytes long.
  StatusOr<UniqueIdBytes> Wait(int timeout_ms) const;
  // Removes the file if present (rank 0 does, once every rank has joined).
  Status Remove() const;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace phub::nccl
