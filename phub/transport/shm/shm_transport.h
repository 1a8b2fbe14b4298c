// The shared-memory transport behind transport.h's seam, for workers on phubd's own host (one
// box with several GPUs, a worker per GPU): a connection is two byte rings in memory both
// processes map (shm_connection.h), set up over an abstract Unix socket named after the
// listener's port (shm_setup.h). The listener's address is not used (such a name belongs to
// the host's network namespace, not to an address); a dial to an address that is not this
// host's fails with what to use instead. Registration is a no-op: every byte is copied once
// into the ring and once out of it, by the CPUs of the two sides.
#pragma once

#include <memory>

#include "phub/transport/transport.h"

namespace phub::transport::shm {

std::shared_ptr<Device> OpenShmDevice();

}  // namespace phub::transport::shm
