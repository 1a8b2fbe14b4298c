#include "phub/rendezvous/file_store.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/rendezvous/frame.h"

namespace phub::rendezvous {

Status FileStore::Publish(const std::string& key, const std::string& value) {
  PHUB_RETURN_IF_ERROR(CheckKey(key));
  if (value.size() > kMaxValueBytes) {
    return absl::InvalidArgumentError(absl::StrCat("the value of '", key, "' is ", value.size(),
                                                   " bytes, more than the ", kMaxValueBytes,
                                                   " a rendezvous holds"));
  }
  const std::string path = PathOf(key), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(value.data(), static_cast<std::streamsize>(value.size()));
    out.close();
    if (!out) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot write '", tmp, "': does the rendezvous directory exist and is it writable?"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

StatusOr<std::string> FileStore::Lookup(const std::string& key, int timeout_ms) {
  PHUB_RETURN_IF_ERROR(CheckKey(key));
  const std::string path = PathOf(key);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      // The file appears by rename, so it is complete. Read at most one byte over the limit.
      std::string value(kMaxValueBytes + 1, '\0');
      in.read(value.data(), static_cast<std::streamsize>(value.size()));
      value.resize(static_cast<std::size_t>(in.gcount()));
      if (value.size() > kMaxValueBytes) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", path, "' holds more than the ", kMaxValueBytes,
            " bytes a rendezvous value may have: remove it, or give every rank a fresh "
            "rendezvous directory"));
      }
      return value;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("'", key, "' was not published in the rendezvous directory '", directory_,
                       "' (no file '", path, "') within ", timeout_ms,
                       " ms: is the rank that publishes it running, with the same --rendezvous?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

Status FileStore::Remove(const std::string& key) {
  PHUB_RETURN_IF_ERROR(CheckKey(key));
  const std::string path = PathOf(key);
  if (std::remove(path.c_str()) != 0 && errno != ENOENT) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot remove '", path, "': ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace phub::rendezvous
