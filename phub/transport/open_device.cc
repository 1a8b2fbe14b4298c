#include "phub/transport/open_device.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "phub/transport/shm/shm_transport.h"
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
    case TransportKind::kShm:
      return shm::OpenShmDevice();
  }
  return absl::InvalidArgumentError("unknown transport kind");
}

StatusOr<std::vector<std::shared_ptr<Device>>> OpenDevicePerNic(
    const TransportOptions& options, const std::vector<std::string>& rdma_devices) {
  std::map<std::string, std::shared_ptr<Device>> opened;
  std::vector<std::shared_ptr<Device>> per_nic;
  for (const std::string& rdma_device : rdma_devices) {
    std::shared_ptr<Device>& device =
        opened[options.kind == TransportKind::kVerbs ? rdma_device : std::string()];
    if (device == nullptr) {
      TransportOptions nic = options;
      nic.rdma.device = rdma_device;
      PHUB_ASSIGN_OR_RETURN(device, OpenDevice(nic));
    }
    per_nic.push_back(device);
  }
  return per_nic;
}

}  // namespace phub::transport
