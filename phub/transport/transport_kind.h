// Which data plane a job runs on: TCP (Boost.Asio, everywhere) or InfiniBand verbs (RC queue
// pairs; RoCE or InfiniBand). phubd chooses with --transport and tells its workers in the
// Welcome; the ring takes the worker's --transport.
#pragma once

#include <string>

#include "phub/common/status.h"

namespace phub::transport {

enum class TransportKind { kTcp, kVerbs };

// InvalidArgument naming the accepted values.
StatusOr<TransportKind> ParseTransportKind(const std::string& name);
std::string TransportName(TransportKind kind);

}  // namespace phub::transport
