// The verbs transport behind transport.h's seam. Every connection starts as a TCP socket (the
// side channel: dialed or accepted like any other), over which VerbsConnection sets up an RC
// queue pair on the loop's completion queue. Memory registered through the Transport is what
// landing zones may lie in and what sends go from without a copy.
#pragma once

#include <memory>

#include "phub/transport/socket_options.h"
#include "phub/transport/transport.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::transport::verbs {

// Opens the RDMA device `options` names (NotFound naming the devices there are).
StatusOr<std::shared_ptr<Device>> OpenVerbsDevice(const DeviceOptions& options,
                                                  const SocketTuning& tuning);

}  // namespace phub::transport::verbs
