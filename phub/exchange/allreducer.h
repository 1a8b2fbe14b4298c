// Allreducer: what AllreduceExchange needs of an allreduce system — one in-place allreduce of a
// host float array, called in the same order with the same lengths on every rank. The ring
// (ring_exchange.h) and NCCL (nccl_exchange.h) are the two behind it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "phub/common/reduce_op.h"
#include "phub/common/status.h"

namespace phub::exchange {

using phub::ReduceOp;  // phub/common/reduce_op.h

class Allreducer {
 public:
  virtual ~Allreducer() = default;
  // On return `data` holds the element-wise sum (or mean) over all ranks.
  virtual Status Allreduce(std::span<float> data, ReduceOp op) = 0;
  virtual std::uint32_t rank() const = 0;
  // "ring", "nccl": the exchange's name in logs and result files.
  virtual std::string name() const = 0;
};

}  // namespace phub::exchange
