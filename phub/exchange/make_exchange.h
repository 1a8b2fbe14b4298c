// One switch for the worker: `--comm ps|ps-colocated|ring|nccl` picks the GradientExchange.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "phub/exchange/gradient_exchange.h"
#include "phub/exchange/nccl_exchange.h"
#include "phub/exchange/ps_exchange.h"
#include "phub/exchange/ring_exchange.h"

namespace phub::exchange {

enum class ExchangeKind { kPs, kPsColocated, kRing, kNccl };

// "ps", "ps-colocated", "ring", "nccl" -> kind; InvalidArgument lists the accepted names.
StatusOr<ExchangeKind> ParseExchangeKind(const std::string& name);

struct ExchangeOptions {
  ExchangeKind kind = ExchangeKind::kPs;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 1;
  PsExchangeOptions ps;      // kPs (one server) and kPsColocated (one per host); rank/world
                             // are taken from above
  RingExchangeOptions ring;  // kRing; rank/world are taken from above
  NcclExchangeOptions nccl;  // kNccl; rank/world are taken from above
};

// Connects the chosen backend. InvalidArgument when the options do not fit the kind (kPs with
// other than one server, kPsColocated with fewer than one, kRing or kNccl without a
// rendezvous); Unimplemented for kNccl in a build without NCCL.
StatusOr<std::unique_ptr<GradientExchange>> MakeExchange(ExchangeOptions options,
                                                         std::vector<keys::TensorSpec> tensors,
                                                         std::vector<std::span<float>> weights);

}  // namespace phub::exchange
