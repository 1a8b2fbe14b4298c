// The CopyEngine of a worker without a GPU: its "device" memory is host memory. Each direction
// has a copy thread that takes copies in the order they were enqueued, waits for the fence
// each names, and memcpy's (a copy from a buffer to itself moves nothing: the CPU worker's
// staging is its own gradients and weights, sent without a copy as before). Bounded: at most
// `max_in_flight` copies queued per direction; ToHost/ToDevice block beyond that.
#pragma once

#include <cstddef>
#include <memory>

#include "phub/staging/copy_engine.h"

namespace phub::staging {

struct HostCopyEngineOptions {
  std::size_t max_in_flight = 256;  // per direction; >= 1
  // False (the CPU worker): "device" memory is host memory, DeviceIsHost() is true and a
  // StagedExchange sends from the device buffers themselves. True: the engine says its device
  // is apart, so a StagedExchange stages through it with real copies between distinct host
  // buffers: how the pipeline's ordering, back-pressure and errors are tested without a GPU,
  // and a host-memory reference for bench/gpu/staging_bench.
  bool separate_device = false;
};

// InvalidArgument for max_in_flight 0.
StatusOr<std::unique_ptr<CopyEngine>> MakeHostCopyEngine(HostCopyEngineOptions options = {});

}  // namespace phub::staging
