// RC queue pairs and completion queues, the two handles a verbs Connection is built from.
// One QP per (worker, server core): reliable connected, so the HCA retransmits and orders, and
// a peer that dies moves the QP to the error state (its work requests complete with an error
// status, which is how a core notices). Every transition and post is checked.
//
// Connecting two QPs takes one exchange of QpAddress over the control plane (TCP):
//   auto a = QueuePair::Create(device, cq, cq);  send a->address() to the peer;
//   a->Connect(peer's address);                   both sides, then post.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "phub/common/status.h"
#include "phub/transport/verbs/memory_region.h"
#include "phub/transport/verbs/verbs_device.h"

namespace phub::transport::verbs {

class CompletionQueue {
 public:
  // `channel` (optional): where the CQ signals new completions once armed (CompletionPoller),
  // through the device's interrupt vector `completion_vector` (< completion_vectors()).
  static StatusOr<std::unique_ptr<CompletionQueue>> Create(const VerbsDevice& device, int depth,
                                                           ibv_comp_channel* channel = nullptr,
                                                           int completion_vector = 0);
  ~CompletionQueue();
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  // Non-blocking: fills up to completions.size() entries, returns how many (0: none yet).
  // A failed poll (not a failed completion: those come back with their wc.status) is an error.
  StatusOr<int> Poll(std::span<ibv_wc> completions);
  ibv_cq* get() const { return cq_; }

 private:
  CompletionQueue(ibv_cq* cq, std::string device) : cq_(cq), device_(std::move(device)) {}
  ibv_cq* cq_;
  std::string device_;
};

// What a peer needs to connect its QP to ours: sent over the control plane.
struct QpAddress {
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;  // first packet sequence number of this side's sends
  ibv_gid gid{};
  std::uint16_t lid = 0;
  std::uint8_t mtu = IBV_MTU_1024;  // ibv_mtu of this side's port
};

struct QpCapacity {
  std::uint32_t send_depth = 256;  // outstanding sends (RDMA writes)
  std::uint32_t recv_depth = 256;  // posted receives (each RDMA WRITE WITH IMM consumes one)
};

class QueuePair {
 public:
  static StatusOr<std::unique_ptr<QueuePair>> Create(const VerbsDevice& device,
                                                     CompletionQueue& send_cq,
                                                     CompletionQueue& recv_cq,
                                                     const QpCapacity& capacity = {});
  ~QueuePair();
  QueuePair(const QueuePair&) = delete;
  QueuePair& operator=(const QueuePair&) = delete;

  QpAddress address() const;
  // RESET -> INIT -> RTR -> RTS towards `remote`. The path MTU is the smaller of the two ports'.
  Status Connect(const QpAddress& remote);

  // One RDMA WRITE WITH IMMEDIATE of `local` (inside `region`) to remote_address/rkey; the
  // peer's next posted receive completes with `imm` once the bytes are in its memory. Signaled:
  // the send CQ gets a completion with `wr_id`.
  Status PostWriteWithImm(const MemoryRegion& region, std::span<const std::byte> local,
                          std::uint64_t remote_address, std::uint32_t rkey, std::uint32_t imm,
                          std::uint64_t wr_id);
  // A zero-length RDMA WRITE WITH IMMEDIATE: only `imm` reaches the peer (a credit return).
  Status PostImmediate(std::uint32_t imm, std::uint64_t wr_id);
  // A receive with no buffer: what a WRITE WITH IMM consumes (the data goes where the writer
  // said; only the immediate comes here).
  Status PostReceive(std::uint64_t wr_id);

  // Moves the QP to the error state: every posted work request completes with
  // IBV_WC_WR_FLUSH_ERR. What a core does to a worker the control plane says is gone.
  Status SetError();

  ibv_qp* get() const { return qp_; }
  std::uint32_t qpn() const { return qp_->qp_num; }

 private:
  QueuePair(const VerbsDevice& device, ibv_qp* qp, std::uint32_t psn)
      : device_(device), qp_(qp), psn_(psn) {}
  Status Modify(ibv_qp_attr& attr, int mask, const char* transition);
  Status PostWrite(ibv_sge* sge, std::uint64_t remote_address, std::uint32_t rkey,
                   std::uint32_t imm, std::uint64_t wr_id);

  const VerbsDevice& device_;
  ibv_qp* qp_;
  std::uint32_t psn_;
};

// "IBV_WC_RETRY_EXC_ERR (transport retry counter exceeded): the peer is gone" — for logs.
std::string CompletionError(const ibv_wc& wc);

}  // namespace phub::transport::verbs
