// Bandwidth-optimal ring allreduce (Baidu / Patarasuk-Yuan) over PHub's transport seam: the
// baseline the parameter server is measured against.
//
// The buffer is cut into N segments (sizes differ by at most one element; some may be empty);
// reduce-scatter runs N-1 steps (rank r sends segment r-s at step s to rank r+1 and adds what
// rank r-1 sends), then allgather runs N-1 steps circulating the completed segments. Each
// segment is cut into pieces of `piece_bytes`, and a piece is forwarded the moment it has been
// received and reduced, so sending, receiving and reducing overlap (pipelining). Every rank
// moves 2(N-1)/N of the buffer each way. Receives of the allgather land straight in the
// caller's buffer; reduce-scatter receives go to one piece-sized scratch buffer and are added
// in place. Sends go straight from the caller's buffer. With a compact RingOptions::wire pieces
// are converted into (and received into) a compact mirror of the buffer instead.
//
// Threading: one event-loop thread per RingAllreduce; Allreduce() blocks the calling thread.
// A lost neighbour fails the current and every later call with Unavailable.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "phub/common/membership.h"
#include "phub/common/reduce_op.h"
#include "phub/common/status.h"
#include "phub/kernels/wire_format.h"
#include "phub/transport/transport_kind.h"
#include "phub/transport/verbs/device_options.h"

namespace phub::ring {

// How the ring connects: the same on every rank (the rank itself is Connect's membership).
struct RingOptions {
  // Where ranks meet (phub/rendezvous/address.h): a directory all ranks share, or
  // tcp://HOST:PORT[/JOB] served by rank 0. Each rank publishes its address there.
  std::string rendezvous;
  std::string listen_host = "127.0.0.1";  // address this rank listens on and publishes
  std::uint64_t piece_bytes = 1 << 20;  // pipelining granularity (multiple of 4)
  int connect_timeout_ms = 30000;
  // The ring's links: TCP, or verbs RC queue pairs (pieces go staged: header + piece into the
  // neighbour's registered receive ring, credit flow control; docs/design.md).
  transport::TransportKind transport = transport::TransportKind::kTcp;
  transport::verbs::DeviceOptions rdma;
  // The element format pieces travel in (`--wire`, as the PS's): fp32, or bf16/fp16 for half
  // the bytes. Sums stay float32: each hop widens what it receives, adds its own float32 values
  // and rounds the partial sum again to pass it on (N-1 roundings of the reduce-scatter, like
  // NCCL's reduced-precision allreduce but summing in float32); the rank that completes a
  // segment rounds it once and keeps the rounded values, so every rank ends bit-identical.
  kernels::WireFormat wire = kernels::WireFormat::kFp32;
};

using phub::ReduceOp;  // phub/common/reduce_op.h

class RingAllreduce {
 public:
  // Listens, publishes its address, connects to rank+1 and accepts rank-1 (ranks of
  // `membership`; InvalidArgument unless rank < world_size). Blocks until both
  // neighbours are connected (or the timeout).
  static StatusOr<std::unique_ptr<RingAllreduce>> Connect(const RingOptions& options,
                                                          Membership membership);
  ~RingAllreduce();

  // In place: on return `data` holds the element-wise sum (or mean) over all ranks. Every rank
  // must call with the same length, in the same order of calls.
  Status Allreduce(std::span<float> data, ReduceOp op = ReduceOp::kSum);

  class Impl;

 private:
  explicit RingAllreduce(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace phub::ring
