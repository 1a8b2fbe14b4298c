#include "phub/ring/peer_address.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "phub/rendezvous/frame.h"

namespace phub::ring {

std::string PeerAddressKey(std::uint32_t rank) { return absl::StrCat("rank", rank, ".addr"); }

Status PublishPeerAddress(rendezvous::Store& store, std::uint32_t rank,
                          const PeerAddress& address) {
  return store.Publish(PeerAddressKey(rank), absl::StrCat(address.host, " ", address.port, "\n"));
}

StatusOr<PeerAddress> LookupPeerAddress(rendezvous::Store& store, std::uint32_t rank,
                                        int timeout_ms) {
  const std::string key = PeerAddressKey(rank);
  PHUB_ASSIGN_OR_RETURN(std::string text, store.Lookup(key, timeout_ms));
  auto refuse = [&] {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, "'s address '", key, "' in the rendezvous ", store.address(),
                     " is '", rendezvous::Printable(text, 64),
                     "', not 'HOST PORT': a file left by another job? Give "
                     "every job a fresh rendezvous directory (or its own tcp:// port)"));
  };
  if (!text.empty() && text.back() == '\n') text.pop_back();
  const std::size_t space = text.find(' ');
  if (space == 0 || space == std::string::npos || space + 1 >= text.size()) return refuse();
  PeerAddress address;
  address.host = text.substr(0, space);
  if (address.host.find_first_of(" \t\n") != std::string::npos) return refuse();
  unsigned port = 0;
  const char* first = text.data() + space + 1;
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, port);
  if (ec != std::errc() || end != last || port == 0 || port > 65535) return refuse();
  address.port = static_cast<std::uint16_t>(port);
  return address;
}

}  // namespace phub::ring
