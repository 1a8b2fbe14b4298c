// Checkpoint files on disk (checkpoint_file.h): the atomic write (temporary file, fsync, rename,
// fsync of the directory), pruning, reading with pread, and finding the newest good one. The
// format itself is checkpoint_encode.cc and checkpoint_decode.cc.
#include "phub/server/checkpoint/checkpoint_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "phub/common/unique_fd.h"
#include "phub/server/checkpoint/checkpoint_format.h"
#include "spdlog/spdlog.h"

namespace phub::server {
namespace {

constexpr std::string_view kPrefix = "checkpoint-";
constexpr std::string_view kSuffix = ".phub";
constexpr absl::string_view kTempSuffix = ".tmp";
// The most one read or write call is asked to move (Linux moves at most ~2 GiB per call).
constexpr std::size_t kMaxIoBytes = std::size_t{1} << 30;

// "<syscall>('<path>') failed: <errno text> (errno N); <fix>", with abseil's code for the errno.
Status SyscallError(absl::string_view syscall, const std::string& path, int err,
                    absl::string_view fix) {
  return Status(absl::ErrnoToStatusCode(err),
                absl::StrCat("checkpoint: ", syscall, "('", path, "') failed: ", std::strerror(err),
                             " (errno ", err, "); ", fix));
}

struct Listing {
  std::vector<std::pair<std::uint64_t, std::string>> checkpoints;  // iteration, name
  std::vector<std::string> temporaries;                            // of crashed writes
};

// The iteration of a checkpoint file's name, or nothing for any other name (the name must be
// exactly what CheckpointFileName gives, so each iteration has one name).
std::optional<std::uint64_t> IterationOfName(std::string_view name) {
  if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) return std::nullopt;
  const std::string_view digits =
      name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix.size());
  std::uint64_t iteration = 0;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), iteration);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  if (CheckpointFileName(iteration) != name) return std::nullopt;
  return iteration;
}

StatusOr<Listing> ListDirectory(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    return SyscallError("opendir", dir, errno,
                        "create the checkpoint directory, or pass one phubd can read");
  }
  Listing listing;
  errno = 0;
  while (const dirent* entry = ::readdir(d)) {
    const std::string_view name = entry->d_name;
    if (auto iteration = IterationOfName(name)) {
      listing.checkpoints.emplace_back(*iteration, std::string(name));
    } else if (name.starts_with(kPrefix) &&
               name.ends_with(std::string_view(kTempSuffix.data(), kTempSuffix.size()))) {
      listing.temporaries.emplace_back(name);
    }
    errno = 0;
  }
  const int err = errno;
  ::closedir(d);
  if (err != 0) return SyscallError("readdir", dir, err, "check the checkpoint directory");
  // Newest first.
  std::sort(listing.checkpoints.begin(), listing.checkpoints.end(), std::greater<>());
  return listing;
}

Status WriteAll(int fd, const std::string& path, const void* data, std::size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd, p, std::min(bytes, kMaxIoBytes));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return SyscallError("write", path, errno,
                          "is the disk full? free space or give phubd another checkpoint "
                          "directory; the previous checkpoint is untouched");
    }
    p += n;
    bytes -= static_cast<std::size_t>(n);
  }
  return absl::OkStatus();
}

Status SyncDirectory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd.get() < 0) {
    return SyscallError("open", dir, errno, "the checkpoint directory must stay readable");
  }
  if (::fsync(fd.get()) != 0) {
    return SyscallError("fsync", dir, errno,
                        "the new checkpoint may not survive a power loss; check the file system");
  }
  return absl::OkStatus();
}

// Writes the file under a temporary name and makes it durable; removes it on any failure.
Status WriteTemporary(const std::string& tmp, int fd, const JobSnapshot& snapshot) {
  const detail::CheckpointSink sink = [&](const void* data, std::size_t bytes) {
    return WriteAll(fd, tmp, data, bytes);
  };
  PHUB_RETURN_IF_ERROR(detail::EncodeCheckpointTo(snapshot, sink));
  if (::fsync(fd) != 0) {
    return SyscallError("fsync", tmp, errno,
                        "the disk did not confirm the write; check the file system");
  }
  return absl::OkStatus();
}

// After `written` (iteration `iteration`) is in place: the temporaries of crashed writes go, and
// of the files older than it only the keep-1 newest stay. Failures are logged: the new file
// is whole whatever happens here.
void Prune(const std::string& dir, std::uint64_t iteration, const std::string& written, int keep) {
  auto listing = ListDirectory(dir);
  if (!listing.ok()) {
    spdlog::warn("checkpoint: old files in '{}' not pruned: {}", dir, listing.status().message());
    return;
  }
  auto remove = [&](const std::string& name, absl::string_view why) {
    const std::string path = absl::StrCat(dir, "/", name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("checkpoint: cannot remove {} '{}': {}", why, path, std::strerror(errno));
    } else {
      spdlog::info("checkpoint: removed {} '{}'", why, path);
    }
  };
  for (const std::string& name : listing->temporaries) {
    remove(name, "the temporary file of an earlier, unfinished write");
  }
  int older_kept = 0;
  for (const auto& [it, name] : listing->checkpoints) {
    if (name == written) continue;
    if (it > iteration) {
      spdlog::warn(
          "checkpoint: '{}/{}' is newer than the one just written ({}): it is kept, "
          "and LoadNewestCheckpoint tries it first; remove it if it belongs to an "
          "abandoned run",
          dir, name, written);
    } else if (++older_kept >= keep) {
      remove(name, "older checkpoint");
    }
  }
}

}  // namespace

StatusOr<std::string> WriteCheckpoint(const std::string& dir, const JobSnapshot& snapshot,
                                      int keep) {
  if (keep < kDefaultCheckpointsKept) {
    return absl::InvalidArgumentError(
        absl::StrCat("WriteCheckpoint: keep is ", keep, "; at least ", kDefaultCheckpointsKept,
                     " are kept, so that a whole checkpoint remains while the next is written"));
  }
  PHUB_RETURN_IF_ERROR(ValidateSnapshot(snapshot));
  const std::uint64_t iteration = CheckpointIteration(snapshot);
  const std::string name = CheckpointFileName(iteration);
  const std::string path = absl::StrCat(dir, "/", name);

  // mkstemps: a fresh name even beside the leftovers of a crashed write (mode 0600: weights are
  // the job's data, not the machine's).
  std::string tmp = absl::StrCat(dir, "/", name, ".XXXXXX", kTempSuffix);
  UniqueFd fd(::mkstemps(tmp.data(), static_cast<int>(kTempSuffix.size())));
  if (fd.get() < 0) {
    return SyscallError("mkstemps", tmp, errno,
                        "the checkpoint directory must exist and be writable by phubd");
  }
  Status status = WriteTemporary(tmp, fd.get(), snapshot);
  if (status.ok() && fd.Close() != 0) {
    status = SyscallError("close", tmp, errno, "the write did not complete; check the disk");
  }
  if (status.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    status = SyscallError("rename", absl::StrCat(tmp, "', '", path), errno,
                          "check the checkpoint directory's permissions");
  }
  if (!status.ok()) {
    ::unlink(tmp.c_str());  // best effort: a leftover is ignored by readers, pruned by writers
    return status;
  }
  PHUB_RETURN_IF_ERROR(SyncDirectory(dir));
  Prune(dir, iteration, name, keep);
  return path;
}

StatusOr<JobSnapshot> ReadCheckpoint(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) {
    return SyscallError("open", path, errno, "pass an existing checkpoint file phubd can read");
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) {
    return SyscallError("fstat", path, errno, "pass an existing checkpoint file");
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::DataLossError(
        absl::StrCat("checkpoint '", path, "' is not a regular file: remove or rename it"));
  }
  const detail::CheckpointSource source = [&](std::uint64_t offset, void* data,
                                              std::size_t bytes) -> Status {
    char* p = static_cast<char*>(data);
    while (bytes > 0) {
      const ssize_t n =
          ::pread(fd.get(), p, std::min(bytes, kMaxIoBytes), static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return SyscallError("pread", path, errno, "check the disk holding it");
      if (n == 0) {
        return absl::DataLossError(
            absl::StrCat("checkpoint '", path, "' is truncated: it shrank to ", offset,
                         " bytes while being read; is something else writing it?"));
      }
      p += n;
      offset += static_cast<std::uint64_t>(n);
      bytes -= static_cast<std::size_t>(n);
    }
    return absl::OkStatus();
  };
  return detail::DecodeCheckpointFrom(static_cast<std::uint64_t>(st.st_size), source, path);
}

StatusOr<LoadedCheckpoint> LoadNewestCheckpoint(const std::string& dir) {
  PHUB_ASSIGN_OR_RETURN(Listing listing, ListDirectory(dir));
  if (listing.checkpoints.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no checkpoint files (checkpoint-<iteration, 12 digits>.phub) in '", dir,
        "': start the job afresh, or point phubd at the directory --checkpoint-dir wrote"));
  }
  LoadedCheckpoint loaded;
  for (const auto& [iteration, name] : listing.checkpoints) {
    const std::string path = absl::StrCat(dir, "/", name);
    StatusOr<JobSnapshot> snapshot = ReadCheckpoint(path);
    std::string why;
    if (!snapshot.ok()) {
      why = std::string(snapshot.status().message());
    } else if (CheckpointIteration(*snapshot) != iteration) {
      why =
          absl::StrCat("it holds iteration ", CheckpointIteration(*snapshot), " but is named for ",
                       iteration, ": it was renamed; give it its own name (",
                       CheckpointFileName(CheckpointIteration(*snapshot)), ") or remove it");
    } else {
      loaded.path = path;
      loaded.snapshot = *std::move(snapshot);
      return loaded;
    }
    spdlog::error("checkpoint '{}' refused, trying an older one: {}", path, why);
    loaded.refused.push_back(absl::StrCat(path, ": ", why));
  }
  return absl::DataLossError(
      absl::StrCat("every checkpoint in '", dir,
                   "' was refused; start the job afresh or restore one from a "
                   "copy. ",
                   absl::StrJoin(loaded.refused, "; ")));
}

}  // namespace phub::server
