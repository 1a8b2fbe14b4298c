// What `--rendezvous` names: a directory every rank can reach (the file store), or
// tcp://HOST:PORT[/JOB] (the TCP store: rank 0 serves on PORT of HOST, the address of rank 0's
// node; every rank connects there; JOB, optional, tells apart two jobs that were given the
// same port). HOST is a name, an IPv4 address, or an IPv6 address in brackets
// (tcp://[fe80::1]:29500). Anything with another "scheme://" is refused, so that a typo such
// as "tpc://..." is not taken for a directory.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include "phub/common/status.h"

namespace phub::rendezvous {

struct DirectoryAddress {
  std::string directory;
};

struct TcpAddress {
  std::string host;  // without the brackets of an IPv6 address
  std::uint16_t port = 0;
  std::string job;  // empty: no job id

  // "tcp://HOST:PORT" (with "/JOB" when there is one), as an operator wrote it.
  std::string ToString() const;
};

using Address = std::variant<DirectoryAddress, TcpAddress>;

// InvalidArgument says what is wrong and shows the accepted forms. An empty text is refused.
StatusOr<Address> ParseAddress(const std::string& text);

}  // namespace phub::rendezvous
