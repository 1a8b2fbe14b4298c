#include "phub/rendezvous/address.h"

#include <charconv>

#include "absl/strings/str_cat.h"
#include "phub/rendezvous/frame.h"

namespace phub::rendezvous {
namespace {

constexpr const char* kForms =
    "use a directory every rank shares, or tcp://HOST:PORT[/JOB] with HOST the address of rank "
    "0's node";

Status Bad(const std::string& text, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("rendezvous '", Printable(text), "': ", why, "; ", kForms));
}

}  // namespace

std::string TcpAddress::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  std::string out = absl::StrCat("tcp://", v6 ? "[" : "", host, v6 ? "]" : "", ":", port);
  if (!job.empty()) absl::StrAppend(&out, "/", job);
  return out;
}

StatusOr<Address> ParseAddress(const std::string& text) {
  if (text.empty()) return Bad(text, "is empty");
  const std::size_t scheme_end = text.find("://");
  if (scheme_end == std::string::npos) return DirectoryAddress{text};
  const std::string scheme = text.substr(0, scheme_end);
  if (scheme != "tcp") {
    return Bad(text, absl::StrCat("'", Printable(scheme, 16), "://' is not a known scheme"));
  }
  std::string rest = text.substr(scheme_end + 3);
  TcpAddress address;
  if (const std::size_t slash = rest.find('/'); slash != std::string::npos) {
    address.job = rest.substr(slash + 1);
    rest.resize(slash);
    if (address.job.empty()) return Bad(text, "has a '/' but no job id after it");
    if (Status s = CheckJob(address.job); !s.ok()) return Bad(text, s.message());
  }
  std::string port_text;
  if (!rest.empty() && rest.front() == '[') {
    const std::size_t close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      return Bad(text, "an IPv6 host needs the form [ADDRESS]:PORT");
    }
    address.host = rest.substr(1, close - 1);
    port_text = rest.substr(close + 2);
  } else {
    const std::size_t colon = rest.rfind(':');
    if (colon == std::string::npos) return Bad(text, "has no :PORT");
    address.host = rest.substr(0, colon);
    port_text = rest.substr(colon + 1);
    if (address.host.find(':') != std::string::npos) {
      return Bad(text, "write an IPv6 host in brackets, as [ADDRESS]:PORT");
    }
  }
  if (address.host.empty()) return Bad(text, "has no HOST");
  if (address.host.size() > 253) return Bad(text, "HOST is longer than a host name can be");
  unsigned port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (ec != std::errc() || end != port_text.data() + port_text.size() || port == 0 ||
      port > 65535) {
    return Bad(text,
               absl::StrCat("PORT '", Printable(port_text, 16), "' is not a port in 1..65535"));
  }
  address.port = static_cast<std::uint16_t>(port);
  return address;
}

}  // namespace phub::rendezvous
