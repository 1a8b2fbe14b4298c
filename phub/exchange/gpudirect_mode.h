// --gpudirect: whether a GPU worker's PS exchange lets the NIC read its gradients from and write
// its weights into GPU memory (GPUDirect RDMA, gpudirect.h) or stages them through pinned host
// memory (staged_exchange.h).
#pragma once

#include <optional>
#include <string_view>

namespace phub::exchange {

enum class GpuDirectMode {
  kAuto,  // where the worker's GPU, driver and RDMA device allow it; else staging, said why
  kOn,    // GPUDirect or an error saying why not
  kOff,   // always staging
};

// "auto", "on", "off"; nullopt for anything else.
inline std::optional<GpuDirectMode> ParseGpuDirectMode(std::string_view name) {
  if (name == "auto") return GpuDirectMode::kAuto;
  if (name == "on") return GpuDirectMode::kOn;
  if (name == "off") return GpuDirectMode::kOff;
  return std::nullopt;
}

}  // namespace phub::exchange
