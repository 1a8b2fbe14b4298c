#include "phub/transport/open_device.h"

#include "absl/strings/str_cat.h"
#include "phub/transport/tcp/tcp_transport.h"
#include "phub/transport/verbs/verbs_transport.h"

namespace phub::transport {

StatusOr<std::shared_ptr<Device>> OpenDevice(const TransportOptions& options) {
  switch (options.kind) {
    case TransportKind::kTcp:
      return tcp::OpenTcpDevice(options.tuning);
    case TransportKind::kVerbs: {
      auto device = verbs::OpenVerbsDevice(options.rdma, options.tuning);
      if (!device.ok()) {
        return Status(device.status().code(),
                      absl::StrCat("--transport verbs: ", device.status().message()));
      }
      return device;
    }
  }
  return absl::InvalidArgumentError("unknown transport kind");
}

}  // namespace phub::transport
