// The CPU backend: oneDNN primitives (worker/backend/onednn/*.cc), host tensors.
#pragma once

#include <memory>

#include "worker/backend/backend.h"

namespace phub::worker {

// Fails (Internal, with oneDNN's message) only if oneDNN cannot make its CPU engine. The backend
// and its ops are used by one thread at a time.
StatusOr<std::unique_ptr<Backend>> MakeOnednnBackend();

}  // namespace phub::worker
