// One switch for the worker: `--comm ps|ps-colocated|ring|nccl` picks the GradientExchange.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "phub/common/membership.h"
#include "phub/exchange/device_exchange.h"
#include "phub/exchange/gpudirect_mode.h"
#include "phub/exchange/gradient_exchange.h"
#include "phub/exchange/nccl_exchange.h"
#include "phub/exchange/ps_exchange.h"
#include "phub/exchange/ring_exchange.h"
#include "phub/exchange/staged_exchange.h"
#include "phub/staging/copy_engine.h"
#include "phub/topology/topology.h"

namespace phub::exchange {

enum class ExchangeKind { kPs, kPsColocated, kRing, kNccl };

// "ps", "ps-colocated", "ring", "nccl" -> kind; InvalidArgument lists the accepted names.
StatusOr<ExchangeKind> ParseExchangeKind(const std::string& name);

struct ExchangeOptions {
  ExchangeKind kind = ExchangeKind::kPs;
  // This worker's rank and world size, held here only: MakeExchange passes it to the backend.
  Membership membership;
  PsExchangeOptions ps;      // kPs (one server) and kPsColocated (one per host)
  RingExchangeOptions ring;  // kRing
  NcclExchangeOptions nccl;  // kNccl
  // Racks of racks (kPs; PlaceInRacks sets it): the worker's place in the topology; the PS
  // client then joins its rack's PBox as its rank in the rack (JoinRackPbox).
  std::optional<topology::Placement> rack;
  // A GPU worker's PS exchange (MakeDeviceExchange): GPUDirect RDMA or staging (gpudirect.h).
  GpuDirectMode gpudirect = GpuDirectMode::kAuto;
  // MakeDeviceExchange's staging: tensors longer than this travel in segments of it
  // (staged_exchange.h); 0: whole. Every worker of a job must use the same.
  std::uint64_t segment_bytes = kDefaultSegmentBytes;
};

// Racks of racks (docs/operations.md "Racks of racks"): `host`, as the topology file names it,
// fixes the worker's rank and world size (all racks': what it shards its data by; they
// replace options.membership) and, with kPs, its server: its rack's PBox. NotFound
// (naming the file and the fix) when no rack lists the host; InvalidArgument for another kind
// than ps.
Status PlaceInRacks(const topology::Topology& topology, const std::string& host,
                    ExchangeOptions& options);

// Connects the chosen backend. InvalidArgument when the options do not fit the kind (kPs with
// other than one server, kPsColocated with fewer than one, kRing or kNccl without a
// rendezvous); Unimplemented for kNccl in a build without NCCL.
StatusOr<std::unique_ptr<GradientExchange>> MakeExchange(ExchangeOptions options,
                                                         std::vector<keys::TensorSpec> tensors,
                                                         std::vector<std::span<float>> weights);

// The same for a worker whose tensors live on a device (device_exchange.h), grads[t] and
// weights[t] its buffers there. `--comm nccl` on a GPU with the fp32 wire: NCCL in place on the
// device and the optimizer step there (nccl_device_exchange.h), where this build has it. Every
// other case: MakeExchange's exchange behind a StagedExchange over `engine` (pinned staging on
// a GPU; on the CPU the buffers themselves, no copy), with the PS on a GPU straight from and
// into the device buffers where options.gpudirect and the machine allow (gpudirect.h; the
// choice and its reason are logged once).
StatusOr<std::unique_ptr<DeviceExchange>> MakeDeviceExchange(
    ExchangeOptions options, std::shared_ptr<staging::CopyEngine> engine,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> grads,
    std::vector<std::span<float>> weights);

}  // namespace phub::exchange
