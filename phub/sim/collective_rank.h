// A rank of an allreduce scheme (kRing, kTree), as DDP and Horovod drive NCCL: backward fills
// the gradient's buckets in order, and each bucket is allreduced as soon as it is full and the
// previous bucket's allreduce is done (NCCL runs the collectives of one stream one after
// another), while backward goes on; the iteration ends with the last bucket's allreduce, and
// the next forward waits for it (the optimizer needs every gradient).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "phub/sim/iteration_log.h"
#include "phub/sim/scenario.h"

namespace simgrid::s4u {
class Host;
}

namespace phub::sim {

struct Bucket {
  std::uint64_t bytes = 0;
  std::size_t last_tensor = 0;  // backward has filled the bucket once this tensor is ready
};

// DDP's bucketing (its Reducer, compute_bucket_assignment_by_size): tensors in backward order,
// a bucket closed once it holds bucket_bytes or more, so a tensor larger than that is a bucket
// of its own. bucket_bytes 0: one bucket of the whole gradient. (DDP also caps its first
// bucket at 1 MiB; not modelled: it moves the first allreduce's start by one small bucket.)
std::vector<Bucket> CutBuckets(const Scenario& scenario);

// Starts rank `g`'s two actors on `host`: its compute (forward, then backward tensor by
// tensor, handing each bucket over when filled) and its collective, which calls
// `allreduce(bucket bytes)` for each bucket in order; `allreduce` blocks the calling actor
// until the rank's part of that allreduce is done. The iteration's end goes into `log`.
void StartCollectiveRank(const Scenario& scenario, IterationLog& log, std::size_t g,
                         simgrid::s4u::Host* host,
                         std::function<void(std::uint64_t bytes)> allreduce);

}  // namespace phub::sim
