#include "phub/transport/transport_kind.h"

#include "absl/strings/str_cat.h"

namespace phub::transport {

StatusOr<TransportKind> ParseTransportKind(const std::string& name) {
  if (name == "tcp") return TransportKind::kTcp;
  if (name == "verbs") return TransportKind::kVerbs;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown transport '", name, "': use tcp or verbs (RDMA: InfiniBand or RoCE)"));
}

std::string TransportName(TransportKind kind) {
  return kind == TransportKind::kVerbs ? "verbs" : "tcp";
}

}  // namespace phub::transport
