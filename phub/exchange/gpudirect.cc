#include "phub/exchange/gpudirect.h"

#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/open_device.h"

namespace phub::exchange {

StatusOr<GpuDirectChoice> ChooseGpuDirect(GpuDirectMode mode, const ExchangeOptions& options,
                                          const staging::CopyEngine& engine,
                                          const std::function<Status()>& probe) {
  auto staging = [&](std::string why) -> StatusOr<GpuDirectChoice> {
    if (mode == GpuDirectMode::kOn) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--gpudirect on: ", why, "; use --gpudirect auto (or off) to stage through host memory"));
    }
    return GpuDirectChoice{false, absl::StrCat("staging through pinned host memory: ", why)};
  };
  if (mode == GpuDirectMode::kOff) return staging("--gpudirect off");
  if (engine.DeviceIsHost()) return staging("the worker's buffers are host memory already");
  if (options.kind != ExchangeKind::kPs && options.kind != ExchangeKind::kPsColocated) {
    return staging(
        "only the PS exchange moves every byte by the NIC (the ring and NCCL's host "
        "path sum on the CPU)");
  }
  if (options.ps.client.wire.compact()) {
    return staging(
        "the compact wire converts gradients and weights on the CPU (--wire fp32 "
        "moves them as they are)");
  }
  if (Status s = probe(); !s.ok()) return staging(std::string(s.message()));
  return GpuDirectChoice{true,
                         "GPUDirect RDMA: the NIC reads the gradients from GPU memory and "
                         "writes the weights into it; nothing is staged"};
}

Status ProbeGpuDirect(staging::CopyEngine& engine, std::span<std::byte> device,
                      const transport::verbs::DeviceOptions& rdma) {
  PHUB_ASSIGN_OR_RETURN(staging::DmaBuf buffer, engine.ExportDmaBuf(device.data(), device.size()));
  PHUB_ASSIGN_OR_RETURN(
      std::shared_ptr<transport::Device> nic,
      transport::OpenDevice({transport::TransportKind::kVerbs, transport::SocketTuning{}, rdma}));
  transport::EventLoop loop("gpudirect probe", -1);
  Status status;
  loop.Run([&] {
    auto bound = nic->Bind(loop);
    if (!bound.ok()) {
      status = bound.status();
      return;
    }
    status = (*bound)->RegisterDeviceMemory({device, buffer.fd(), buffer.offset()});
    if (status.ok()) (*bound)->Unregister(device);
  });
  return status;
}

std::function<StatusOr<transport::DeviceMemory>(std::span<std::byte>)> DeviceMemoryExporter(
    std::shared_ptr<staging::CopyEngine> engine) {
  struct Held {
    std::mutex mu;
    std::vector<staging::DmaBuf> buffers;  // open while a registration may still use them
  };
  auto held = std::make_shared<Held>();
  return [engine = std::move(engine),
          held](std::span<std::byte> range) -> StatusOr<transport::DeviceMemory> {
    PHUB_ASSIGN_OR_RETURN(staging::DmaBuf buffer, engine->ExportDmaBuf(range.data(), range.size()));
    std::lock_guard lock(held->mu);
    held->buffers.push_back(buffer);
    return transport::DeviceMemory{range, buffer.fd(), buffer.offset()};
  };
}

}  // namespace phub::exchange
