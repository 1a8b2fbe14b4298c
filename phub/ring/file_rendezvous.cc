#include "phub/ring/file_rendezvous.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"

namespace phub::ring {

std::string FileRendezvous::PathOf(std::uint32_t rank) const {
  return absl::StrCat(directory_, "/rank", rank, ".addr");
}

Status FileRendezvous::Publish(std::uint32_t rank, const PeerAddress& address) const {
  const std::string path = PathOf(rank), tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << address.host << " " << address.port << "\n";
    if (!out) {
      return absl::InvalidArgumentError(absl::StrCat("cannot write '", tmp,
                                                     "': is the rendezvous directory writable?"));
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("cannot rename '", tmp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

StatusOr<PeerAddress> FileRendezvous::Lookup(std::uint32_t rank, int timeout_ms) const {
  const std::string path = PathOf(rank);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (true) {
    std::ifstream in(path);
    PeerAddress address;
    if (in >> address.host >> address.port) return address;
    if (std::chrono::steady_clock::now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "rank ", rank, " did not publish its address ('", path, "') within ", timeout_ms,
          " ms: is it running, with the same rendezvous directory?"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace phub::ring
