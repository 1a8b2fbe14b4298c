#include "phub/transport/transport_kind.h"

#include "absl/strings/str_cat.h"

namespace phub::transport {

StatusOr<TransportKind> ParseTransportKind(const std::string& name) {
  if (name == "tcp") return TransportKind::kTcp;
  if (name == "verbs") return TransportKind::kVerbs;
  if (name == "shm") return TransportKind::kShm;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown transport '", name,
      "': use tcp, verbs (RDMA: InfiniBand or RoCE) or shm (workers on phubd's host)"));
}

std::string TransportName(TransportKind kind) {
  switch (kind) {
    case TransportKind::kVerbs: return "verbs";
    case TransportKind::kShm: return "shm";
    case TransportKind::kTcp: break;
  }
  return "tcp";
}

}  // namespace phub::transport
