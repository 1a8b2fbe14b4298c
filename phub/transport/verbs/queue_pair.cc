#include "phub/transport/verbs/queue_pair.h"

#include <arpa/inet.h>

#include <cerrno>
#include <random>

#include "absl/strings/str_cat.h"
#include "phub/transport/verbs/verbs_error.h"

namespace phub::transport::verbs {

StatusOr<std::unique_ptr<CompletionQueue>> CompletionQueue::Create(const VerbsDevice& device,
                                                                   int depth,
                                                                   ibv_comp_channel* channel,
                                                                   int completion_vector) {
  ibv_cq* cq = ibv_create_cq(device.context(), depth, nullptr, channel, completion_vector);
  if (cq == nullptr) return VerbsError(absl::StrCat("ibv_create_cq(", depth, ")"), device.name(), errno);
  return std::unique_ptr<CompletionQueue>(new CompletionQueue(cq, device.name()));
}

CompletionQueue::~CompletionQueue() { ibv_destroy_cq(cq_); }

StatusOr<int> CompletionQueue::Poll(std::span<ibv_wc> completions) {
  int n = ibv_poll_cq(cq_, static_cast<int>(completions.size()), completions.data());
  if (n < 0) return VerbsError("ibv_poll_cq", device_, -n);
  return n;
}

StatusOr<std::unique_ptr<QueuePair>> QueuePair::Create(const VerbsDevice& device,
                                                       CompletionQueue& send_cq,
                                                       CompletionQueue& recv_cq,
                                                       const QpCapacity& capacity) {
  ibv_qp_init_attr init{};
  init.send_cq = send_cq.get();
  init.recv_cq = recv_cq.get();
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = capacity.send_depth;
  init.cap.max_recv_wr = capacity.recv_depth;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(device.pd(), &init);
  if (qp == nullptr) return VerbsError("ibv_create_qp(RC)", device.name(), errno);
  // A random 24-bit start, so a stale packet of an earlier QP with the same number is refused.
  std::uint32_t psn = std::random_device{}() & 0xffffff;
  return std::unique_ptr<QueuePair>(new QueuePair(device, qp, psn));
}

QueuePair::~QueuePair() { ibv_destroy_qp(qp_); }

QpAddress QueuePair::address() const {
  QpAddress a;
  a.qpn = qp_->qp_num;
  a.psn = psn_;
  a.gid = device_.gid();
  a.lid = device_.lid();
  a.mtu = static_cast<std::uint8_t>(device_.active_mtu());
  return a;
}

Status QueuePair::Modify(ibv_qp_attr& attr, int mask, const char* transition) {
  if (int err = ibv_modify_qp(qp_, &attr, mask); err != 0) {
    return VerbsError(absl::StrCat("ibv_modify_qp(", transition, ") of QP ", qp_->qp_num),
                      device_.name(), err);
  }
  return absl::OkStatus();
}

Status QueuePair::Connect(const QpAddress& remote) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = device_.port();
  attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  PHUB_RETURN_IF_ERROR(Modify(
      attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, "INIT"));

  attr = {};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min<int>(remote.mtu, device_.active_mtu()));
  attr.dest_qp_num = remote.qpn;
  attr.rq_psn = remote.psn;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;  // 0.64 ms before the peer retries a write that found no receive
  attr.ah_attr.port_num = device_.port();
  if (device_.is_roce()) {  // routed by GID (RoCE v2: UDP/IP)
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = remote.gid;
    attr.ah_attr.grh.sgid_index = static_cast<std::uint8_t>(device_.gid_index());
    attr.ah_attr.grh.hop_limit = 64;
  } else {
    attr.ah_attr.dlid = remote.lid;
  }
  PHUB_RETURN_IF_ERROR(Modify(attr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER,
                              "RTR"));

  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = 14;   // 4.096 us * 2^14 = 67 ms per try
  attr.retry_cnt = 7;  // then the QP errors (HCAs; soft-RoCE never does: see the tests)
  attr.rnr_retry = 7;  // 7 = retry for ever while the peer has no receive posted
  attr.sq_psn = psn_;
  attr.max_rd_atomic = 1;
  return Modify(attr,
                IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                "RTS");
}

Status QueuePair::SetError() {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  return Modify(attr, IBV_QP_STATE, "ERR");
}

Status QueuePair::PostWriteWithImm(const MemoryRegion& region, std::span<const std::byte> local,
                                   std::uint64_t remote_address, std::uint32_t rkey,
                                   std::uint32_t imm, std::uint64_t wr_id) {
  if (local.data() < region.data() || local.data() + local.size() > region.data() + region.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RDMA write of ", local.size(), " bytes: the buffer is not inside its memory region"));
  }
  ibv_sge sge{};
  sge.addr = reinterpret_cast<std::uint64_t>(local.data());
  sge.length = static_cast<std::uint32_t>(local.size());
  sge.lkey = region.lkey();
  return PostWrite(local.empty() ? nullptr : &sge, remote_address, rkey, imm, wr_id);
}

Status QueuePair::PostImmediate(std::uint32_t imm, std::uint64_t wr_id) {
  // Zero bytes: no address or rkey is checked (IBA C9-88).
  return PostWrite(nullptr, 0, 0, imm, wr_id);
}

Status QueuePair::PostWrite(ibv_sge* sge, std::uint64_t remote_address, std::uint32_t rkey,
                            std::uint32_t imm, std::uint64_t wr_id) {
  ibv_send_wr wr{};
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = sge == nullptr ? 0 : 1;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = remote_address;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  if (int err = ibv_post_send(qp_, &wr, &bad); err != 0) {
    return VerbsError(absl::StrCat("ibv_post_send(RDMA_WRITE_WITH_IMM, ", sge ? sge->length : 0,
                                   " bytes) on QP ", qp_->qp_num),
                      device_.name(), err);
  }
  return absl::OkStatus();
}

Status QueuePair::PostReceive(std::uint64_t wr_id) {
  ibv_recv_wr wr{};
  wr.wr_id = wr_id;
  wr.num_sge = 0;
  ibv_recv_wr* bad = nullptr;
  if (int err = ibv_post_recv(qp_, &wr, &bad); err != 0) {
    return VerbsError(absl::StrCat("ibv_post_recv on QP ", qp_->qp_num), device_.name(), err);
  }
  return absl::OkStatus();
}

std::string CompletionError(const ibv_wc& wc) {
  std::string text = absl::StrCat(ibv_wc_status_str(wc.status), " (status ",
                                  static_cast<int>(wc.status), ", vendor error ", wc.vendor_err,
                                  ") on QP ", wc.qp_num);
  if (wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR) {
    absl::StrAppend(&text, ": the peer stopped answering (gone, or its QP is in error)");
  } else if (wc.status == IBV_WC_WR_FLUSH_ERR) {
    absl::StrAppend(&text, ": flushed because the QP was already in error");
  } else if (wc.status == IBV_WC_REM_ACCESS_ERR) {
    absl::StrAppend(&text, ": the peer refused the write (address or rkey outside its region)");
  }
  return text;
}

}  // namespace phub::transport::verbs
