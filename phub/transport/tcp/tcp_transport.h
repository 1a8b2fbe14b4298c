// The TCP transport behind transport.h's seam: dialing is connect + the ATTACH header written
// first; accepting hands each socket straight to its handler (a TCP connection has no set-up
// beyond accept, so nothing is ever "setting up"). Registration is a no-op: TCP copies through
// the kernel either way.
#pragma once

#include <memory>

#include "phub/transport/socket_options.h"
#include "phub/transport/transport.h"

namespace phub::transport::tcp {

std::shared_ptr<Device> OpenTcpDevice(const SocketTuning& tuning);

}  // namespace phub::transport::tcp
