// The CPU backend: oneDNN primitives (worker/backend/onednn/*.cc), host tensors.
#pragma once

#include <memory>

#include "worker/backend/backend.h"

namespace phub::worker {

std::unique_ptr<Backend> MakeOnednnBackend();

}  // namespace phub::worker
