// GPUDirect RDMA for a GPU worker's PS exchange (docs/design.md "GPUDirect"): the NIC reads each
// gradient from GPU memory and writes the fresh weights into it, so nothing is staged through
// host memory. It needs every byte to move by the NIC alone: the PS exchange (the ring and the
// host NCCL path sum on the CPU), the fp32 wire both ways (the compact wires convert on the
// CPU), a GPU and driver that export device memory as a dma-buf, and an RDMA device that
// registers one — and phubd on verbs, which only the Welcome tells (PsClient then fails with
// FailedPrecondition naming --gpudirect off). Everything else stages, and says why once.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "phub/common/status.h"
#include "phub/exchange/gpudirect_mode.h"
#include "phub/exchange/make_exchange.h"
#include "phub/staging/copy_engine.h"
#include "phub/transport/transport.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::exchange {

struct GpuDirectChoice {
  bool direct = false;
  std::string reason;  // a sentence for the log: what was chosen and why
};

// What the worker's own machine allows: `probe` is ProbeGpuDirect's answer (only asked when the
// rest allows). kOn that cannot be is FailedPrecondition with the reason.
StatusOr<GpuDirectChoice> ChooseGpuDirect(GpuDirectMode mode, const ExchangeOptions& options,
                                          const staging::CopyEngine& engine,
                                          const std::function<Status()>& probe);

// Exports `device` (one of the worker's device buffers) as a dma-buf and registers it with the
// first RDMA device of `rdma` on a loop of its own, then forgets it: OK where this machine's
// GPU, driver and NIC can do GPUDirect RDMA, else why not.
Status ProbeGpuDirect(staging::CopyEngine& engine, std::span<std::byte> device,
                      const transport::verbs::DeviceOptions& rdma);

// PsClientOptions::device_memory over `engine`: each range exported as a dma-buf, whose
// descriptor is kept open as long as the returned function (registrations need it open).
std::function<StatusOr<transport::DeviceMemory>(std::span<std::byte>)> DeviceMemoryExporter(
    std::shared_ptr<staging::CopyEngine> engine);

}  // namespace phub::exchange
