// Which data plane a job runs on: TCP (Boost.Asio, everywhere), InfiniBand verbs (RC queue
// pairs; RoCE or InfiniBand) or shared memory (workers on phubd's own host). phubd chooses with --transport and tells its workers in the
// Welcome; the ring takes the worker's --transport.
#pragma once

#include <string>

#include "phub/common/status.h"

namespace phub::transport {

enum class TransportKind { kTcp, kVerbs, kShm };

// InvalidArgument naming the accepted values.
StatusOr<TransportKind> ParseTransportKind(const std::string& name);
std::string TransportName(TransportKind kind);

}  // namespace phub::transport
