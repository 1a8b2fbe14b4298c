#include "phub/nccl/unique_id_file.h"

#include <nccl.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <thread>

#include "absl/strings/str_cat.h"

namespace phub::nccl {

static_assert(kUniqueIdBytes == NCCL_UNIQUE_ID_BYTES && sizeof(ncclUniqueId) == kUniqueIdBytes,
              "UniqueIdBytes must hold exactly one ncclUniqueId");

UniqueIdFile::UniqueIdFile(const std::string& directory)
    : path_(absl::StrCat(directory, "/nccl.id")) {}

Status UniqueIdFile::Publish(const UniqueIdBytes& id) const {
  const std::string tmp = path_ + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(id.data(), static_cast<std::streamsize>(id.size()));
    out.close();
    if (!out) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot write '", tmp, "': does the rendezvous directory exist and is it writable?"));
    }
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot rename '", tmp, "' to '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

StatusOr<UniqueIdBytes> UniqueIdFile::Wait(int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    std::ifstream in(path_, std::ios::binary);
    if (in) {
      // The file appears by rename, so it is complete: any other size is not an id.
      const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      if (bytes.size() != kUniqueIdBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", path_, "' holds ", bytes.size(), " bytes, not a ", kUniqueIdBytes,
            "-byte NCCL id: remove it, or give every rank a fresh rendezvous directory"));
      }
      UniqueIdBytes id;
      std::memcpy(id.data(), bytes.data(), id.size());
      return id;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("rank 0 did not publish the NCCL id ('", path_, "') within ", timeout_ms,
                       " ms: is rank 0 running, with the same rendezvous directory?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status UniqueIdFile::Remove() const {
  if (std::remove(path_.c_str()) != 0 && errno != ENOENT) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot remove '", path_, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace phub::nccl
