#include "phub/exchange/make_exchange.h"

#include "phub/exchange/gpudirect.h"
#include "phub/exchange/staged_exchange.h"
#include "spdlog/spdlog.h"
#ifdef PHUB_HAVE_NCCL_DEVICE_EXCHANGE
#include "phub/exchange/nccl_device_exchange.h"
#endif

#include "absl/strings/str_cat.h"

namespace phub::exchange {
namespace {
constexpr const char* kRendezvousForms =
    "a directory shared by all workers, or tcp://HOST:PORT with HOST the address of rank 0's "
    "node (rank 0 serves it on PORT)";
}  // namespace

StatusOr<ExchangeKind> ParseExchangeKind(const std::string& name) {
  if (name == "ps") return ExchangeKind::kPs;
  if (name == "ps-colocated") return ExchangeKind::kPsColocated;
  if (name == "ring") return ExchangeKind::kRing;
  if (name == "nccl") return ExchangeKind::kNccl;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown exchange '", name, "': use ps, ps-colocated, ring or nccl"));
}

StatusOr<std::unique_ptr<GradientExchange>> MakeExchange(ExchangeOptions options,
                                                         std::vector<keys::TensorSpec> tensors,
                                                         std::vector<std::span<float>> weights) {
  switch (options.kind) {
    case ExchangeKind::kPs:
    case ExchangeKind::kPsColocated: {
      // Racks of racks: its rack's PBox, as its rank in the rack.
      const PsSeat seat = options.rack ? JoinRackPbox(*options.rack, options.ps)
                                       : PsSeat{options.membership, {}};
      const std::size_t servers = options.ps.servers.size();
      if (options.kind == ExchangeKind::kPs && servers != 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--comm ps takes exactly one server (HOST:PORT of phubd), got ", servers,
            "; for one phubd per host use --comm ps-colocated"));
      }
      if (servers == 0) {
        return absl::InvalidArgumentError(
            "--comm ps-colocated needs the HOST:PORT of every host's phubd, got none");
      }
      PHUB_ASSIGN_OR_RETURN(
          auto ps, PsExchange::Connect(options.ps, seat, std::move(tensors), std::move(weights)));
      return std::unique_ptr<GradientExchange>(std::move(ps));
    }
    case ExchangeKind::kRing: {
      if (options.ring.ring.rendezvous.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--comm ring needs --rendezvous: ",
                                                       kRendezvousForms));
      }
      PHUB_ASSIGN_OR_RETURN(auto ring, ConnectRingExchange(options.ring, options.membership,
                                                           std::move(tensors), std::move(weights)));
      return std::unique_ptr<GradientExchange>(std::move(ring));
    }
    case ExchangeKind::kNccl: {
      if (options.membership.world_size > 1 && options.nccl.rendezvous.empty()) {
        return absl::InvalidArgumentError(absl::StrCat("--comm nccl needs --rendezvous: ",
                                                       kRendezvousForms));
      }
#ifdef PHUB_HAVE_NCCL
      PHUB_ASSIGN_OR_RETURN(auto nccl, ConnectNcclExchange(options.nccl, options.membership,
                                                           std::move(tensors), std::move(weights)));
      return std::unique_ptr<GradientExchange>(std::move(nccl));
#else
      return absl::UnimplementedError(
          "--comm nccl: this build has no NCCL (CMake found no CUDA toolkit with NCCL): install "
          "them and rebuild with -DPHUB_WITH_CUDA=ON, or use --comm ring");
#endif
    }
  }
  return absl::InvalidArgumentError("unknown exchange kind");
}

StatusOr<std::unique_ptr<DeviceExchange>> MakeDeviceExchange(
    ExchangeOptions options, std::shared_ptr<staging::CopyEngine> engine,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> grads,
    std::vector<std::span<float>> weights) {
#ifdef PHUB_HAVE_NCCL_DEVICE_EXCHANGE
  if (options.kind == ExchangeKind::kNccl && !engine->DeviceIsHost() &&
      options.nccl.wire == kernels::WireFormat::kFp32) {
    if (options.membership.world_size > 1 && options.nccl.rendezvous.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("--comm nccl needs --rendezvous: ",
                                                     kRendezvousForms));
    }
    return ConnectNcclDeviceExchange(options.nccl, options.membership, std::move(tensors),
                                     std::move(grads), std::move(weights));
  }
#endif
  StagedExchangeOptions staged;
  staged.segment_bytes = options.segment_bytes;
  if (!engine->DeviceIsHost()) {
    auto probe = [&]() -> Status {
      for (std::span<float> g : grads) {
        if (!g.empty()) {
          return ProbeGpuDirect(*engine, std::as_writable_bytes(g), options.ps.client.rdma);
        }
      }
      return absl::FailedPreconditionError("no gradient to send");
    };
    PHUB_ASSIGN_OR_RETURN(GpuDirectChoice choice,
                          ChooseGpuDirect(options.gpudirect, options, *engine, probe));
    spdlog::info("rank {}: {}", options.membership.rank, choice.reason);
    staged.direct = choice.direct;
    if (choice.direct) options.ps.client.device_memory = DeviceMemoryExporter(engine);
  }
  std::vector<std::span<const float>> sent(grads.begin(), grads.end());
  return StagedExchange::Create(
      std::move(engine), std::move(tensors), std::move(sent), std::move(weights),
      [&options](std::vector<keys::TensorSpec> t, std::vector<std::span<float>> w) {
        return MakeExchange(std::move(options), std::move(t), std::move(w));
      },
      staged);
}

Status PlaceInRacks(const topology::Topology& topology, const std::string& host,
                    ExchangeOptions& options) {
  if (options.kind != ExchangeKind::kPs) {
    return absl::InvalidArgumentError(
        "--topology (racks of racks) goes with --comm ps: each worker joins its rack's PBox");
  }
  PHUB_ASSIGN_OR_RETURN(topology::Placement placement, topology.Locate(host));
  options.membership = {placement.rank, placement.world_size};
  options.rack = placement;
  return absl::OkStatus();
}

}  // namespace phub::exchange
