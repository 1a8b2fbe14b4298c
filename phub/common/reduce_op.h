// How an allreduce combines the ranks' copies: one enum for every allreduce (the ring, NCCL,
// the exchanges above them). kMean divides the sum by the world size inside the reduction.
#pragma once

namespace phub {

enum class ReduceOp { kSum, kMean };

}  // namespace phub
