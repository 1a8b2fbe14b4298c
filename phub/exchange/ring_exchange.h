// `--comm ring`: our ring allreduce (phub/ring) behind AllreduceExchange.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "phub/common/membership.h"
#include "phub/exchange/allreduce_exchange.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/keys/key_table.h"
#include "phub/ring/ring_allreduce.h"

namespace phub::exchange {

struct RingExchangeOptions {
  ring::RingOptions ring;              // rendezvous, transport, piece size, wire
  kernels::OptimizerConfig optimizer;  // what phubd's --optimizer flags would say
};

// Connects the ring (blocks until both neighbours are there), then as AllreduceExchange::Create.
StatusOr<std::unique_ptr<AllreduceExchange>> ConnectRingExchange(
    const RingExchangeOptions& options, Membership membership,
    std::vector<keys::TensorSpec> tensors, std::vector<std::span<float>> weights);

}  // namespace phub::exchange
