#include "phub/transport/verbs/verbs_connection.h"

#include <arpa/inet.h>

#include <algorithm>
#include <boost/asio/read.hpp>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "phub/transport/verbs/immediate.h"
#include "spdlog/spdlog.h"

// The data path: posting, completions, credits and delivery. The set-up (Dial, Accept, the
// queue pair and zones) is in verbs_connection_setup.cc.

namespace phub::transport::verbs {

namespace asio = boost::asio;

namespace {

// The CPU never reads or writes device memory (GPUDirect RDMA): the NIC sends it from where it
// lies into a landing zone, and a message that would need a copy of it fails instead.
constexpr char kNicOnly[] = "device memory is sent only by the NIC (GPUDirect), never copied";
constexpr char kStraddles[] =
    "lies partly in device memory and not wholly in one registered region, so it would be "
    "copied: ";

}  // namespace

VerbsConnection::~VerbsConnection() {
  // The route (and its CQ reservation) stays until here, so the flushes of a closed QP are
  // still counted and still find this (closed, ignoring) connection.
  if (qp_) loop_.poller->Detach(qp_->qpn());
  qp_.reset();  // before the regions it may still point at
}

void VerbsConnection::Start() {
  started_ = true;
  WatchSideChannel();
  // The dialer's ATTACH came with the set-up: it is the first message.
  if (peer_endpoint_.attach) {
    if (Status s = Deliver(*peer_endpoint_.attach, {}); !s.ok()) return Close(s);
    if (closed_) return;
  }
  // Completions that came before Start (the peer may write as soon as the set-up is done).
  std::vector<ibv_wc> early;
  early.swap(before_start_);
  for (const ibv_wc& wc : early) {
    if (closed_) return;
    OnCompletion(wc);
  }
  Pump();
}

void VerbsConnection::WatchSideChannel() {
  asio::async_read(socket_, asio::buffer(&side_byte_, 1),
                   [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
    if (self->closed_) return;
    // What the peer wrote before it closed (its BYE) is in the CQ already: take it first.
    self->loop_.poller->PollNow();
    if (self->closed_) return;
    if (!ec) {
      return self->Close(absl::InvalidArgumentError(
          absl::StrCat("unexpected bytes on the verbs side channel from ", self->peer_)));
    }
    self->Close(absl::UnavailableError(absl::StrCat("peer ", self->peer_,
                                                    " closed the connection (side channel: ",
                                                    ec.message(), ")")));
  });
}

void VerbsConnection::Send(const WireHeader& header, std::span<const std::byte> payload,
                           SendDone done) {
  if (closed_) {
    if (done) done(absl::UnavailableError(absl::StrCat("connection to ", peer_, " is closed")));
    return;
  }
  pending_.push_back(Pending{header, payload, std::move(done)});
  Pump();
}

void VerbsConnection::Pump() {
  if (closed_ || !started_) return;
  while (!closed_ && in_flight_.size() < limits_.send_depth) {
    if (credits_owed_ > 0) {
      const std::uint64_t wr = next_wr_id_++;
      if (Status s = qp_->PostImmediate(Immediate(kCredit, credits_owed_), wr); !s.ok()) {
        return Close(s);
      }
      in_flight_.push_back(InFlight{wr, nullptr, -1});
      credits_owed_ = 0;
      continue;
    }
    if (pending_.empty()) return;
    bool blocked = false;
    if (Status s = PostNext(pending_.front(), blocked); !s.ok()) return Close(s);
    if (blocked) return;
    pending_.pop_front();
  }
}

StatusOr<int> VerbsConnection::TakeSendBuffer() {
  if (send_pool_.empty()) {  // first payload that needs a copy: make the pool now
    send_pool_.assign(std::size_t{limits_.send_buffers} * send_buffer_bytes_, std::byte{0});
    PHUB_ASSIGN_OR_RETURN(send_pool_mr_,
                          MemoryRegion::Register(*loop_.device, send_pool_, 0));
    for (std::uint32_t i = 0; i < limits_.send_buffers; ++i) {
      free_buffers_.push_back(static_cast<int>(i));
    }
  }
  if (free_buffers_.empty()) return -1;
  int buffer = free_buffers_.back();
  free_buffers_.pop_back();
  return buffer;
}

Status VerbsConnection::PostNext(Pending& next, bool& blocked) {
  const WireHeader& h = next.header;
  if (next.payload.size() > limits_.max_send_payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        OpName(h.op), " of ", next.payload.size(), " bytes to ", peer_,
        ": over this connection's VerbsLimits.max_send_payload_bytes (",
        limits_.max_send_payload_bytes, "), which sizes its send buffers"));
  }
  const std::uint64_t wr = next_wr_id_;
  int buffer = -1;
  auto zone_it = next.payload.empty()
                     ? peer_endpoint_.zone_index.end()
                     : peer_endpoint_.zone_index.find(ZoneKey(h.op, h.worker, h.chunk));
  if (zone_it != peer_endpoint_.zone_index.end()) {
    const std::uint32_t index = zone_it->second;
    RemoteZone& zone = peer_endpoint_.zones[index];
    if (next.payload.size() != zone.bytes) {
      return absl::InvalidArgumentError(absl::StrCat(OpName(h.op), " of chunk ", h.chunk, ": ",
                                                     next.payload.size(), " bytes for ", peer_,
                                                     "'s landing zone of ", zone.bytes));
    }
    if (h.iteration != zone.next_iteration) {
      return absl::InternalError(absl::StrCat(
          OpName(h.op), " of chunk ", h.chunk, " for iteration ", h.iteration, " where ", peer_,
          " expects ", zone.next_iteration, ": over verbs a zone's iterations follow in order"));
    }
    const MemoryRegion* region = loop_.registry->Find(next.payload.data(), next.payload.size());
    std::span<const std::byte> local = next.payload;
    if (region == nullptr) {  // not registered by its owner: copy into a send buffer
      if (loop_.registry->InDeviceMemory(next.payload.data(), next.payload.size())) {
        return absl::FailedPreconditionError(
            absl::StrCat(OpName(h.op), " of chunk ", h.chunk, " for ", peer_, "'s landing zone ",
                         kStraddles, kNicOnly, "; send it from within one region"));
      }
      PHUB_ASSIGN_OR_RETURN(buffer, TakeSendBuffer());
      if (buffer < 0) return (blocked = true, absl::OkStatus());
      std::byte* copy = send_pool_.data() + std::size_t(buffer) * send_buffer_bytes_;
      std::memcpy(copy, next.payload.data(), next.payload.size());
      local = {copy, next.payload.size()};
      region = &send_pool_mr_;
      ++stats_.copied_sent;
    }
    if (Status s = qp_->PostWriteWithImm(*region, local, zone.address, zone.rkey,
                                         Immediate(kDirect, index), wr);
        !s.ok()) {
      if (buffer >= 0) free_buffers_.push_back(buffer);
      return s;
    }
    ++zone.next_iteration;
    ++stats_.direct_sent;
  } else {
    const StagedRing& ring = peer_endpoint_.ring;
    const std::size_t total = kWireHeaderBytes + next.payload.size();
    if (total > ring.slot_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          OpName(h.op), " of ", next.payload.size(), " bytes has no landing zone at ", peer_,
          " and is too large for its staged slots (", ring.slot_bytes - kWireHeaderBytes,
          " payload bytes): raise the receiver's VerbsLimits.staged_payload_bytes"));
    }
    if (loop_.registry->InDeviceMemory(next.payload.data(), next.payload.size())) {
      return absl::FailedPreconditionError(
          absl::StrCat(OpName(h.op), " of chunk ", h.chunk,
                       " from device memory needs a landing zone at ", peer_, ": ", kNicOnly));
    }
    if (credits_ == 0) return (blocked = true, absl::OkStatus());
    PHUB_ASSIGN_OR_RETURN(buffer, TakeSendBuffer());
    if (buffer < 0) return (blocked = true, absl::OkStatus());
    std::byte* copy = send_pool_.data() + std::size_t(buffer) * send_buffer_bytes_;
    EncodedHeader encoded = EncodeWireHeader(h);
    std::memcpy(copy, encoded.data(), encoded.size());
    if (!next.payload.empty()) {
      std::memcpy(copy + kWireHeaderBytes, next.payload.data(), next.payload.size());
    }
    if (Status s = qp_->PostWriteWithImm(send_pool_mr_, {copy, total},
                                         ring.address + std::uint64_t{next_peer_slot_} * ring.slot_bytes,
                                         ring.rkey, Immediate(kStaged, next_peer_slot_), wr);
        !s.ok()) {
      free_buffers_.push_back(buffer);
      return s;
    }
    --credits_;
    next_peer_slot_ = (next_peer_slot_ + 1) % ring.slots;
    ++stats_.staged_sent;
  }
  ++next_wr_id_;
  in_flight_.push_back(InFlight{wr, std::move(next.done), buffer});
  return absl::OkStatus();
}

void VerbsConnection::OnCompletion(const ibv_wc& wc) {
  auto self = shared_from_this();  // a handler callback may drop the last other reference
  if (closed_) return;             // flushed work requests after Close
  if (!started_) {
    before_start_.push_back(wc);
    return;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    return Close(absl::UnavailableError(
        absl::StrCat("verbs connection to ", peer_, ": ", CompletionError(wc))));
  }
  if (wc.opcode & IBV_WC_RECV) return OnReceive(wc);
  if (in_flight_.empty() || in_flight_.front().wr_id != wc.wr_id) {
    return Close(absl::InternalError(absl::StrCat("send completion ", wc.wr_id, " from ", peer_,
                                                  " out of order")));
  }
  InFlight finished = std::move(in_flight_.front());
  in_flight_.pop_front();
  if (finished.buffer >= 0) free_buffers_.push_back(finished.buffer);
  if (finished.done) finished.done(absl::OkStatus());
  Pump();
}

void VerbsConnection::OnReceive(const ibv_wc& wc) {
  if (Status s = qp_->PostReceive(0); !s.ok()) return Close(s);
  if (!(wc.wc_flags & IBV_WC_WITH_IMM)) {
    return Close(absl::InvalidArgumentError(
        absl::StrCat("a receive from ", peer_, " without an immediate: not a PHub peer")));
  }
  const std::uint32_t imm = ntohl(wc.imm_data);
  const std::uint32_t index = imm & kIndexMask;
  Status status;
  switch (imm >> kKindShift) {
    case kCredit:
      credits_ += index;
      break;
    case kStaged:
      status = OnStaged(index, wc.byte_len);
      break;
    case kDirect:
      status = OnDirect(index, wc.byte_len);
      break;
    default:
      status = absl::InvalidArgumentError(absl::StrCat("immediate ", imm, " from ", peer_));
  }
  if (closed_) return;
  if (!status.ok()) return Close(status);
  Pump();
}

Status VerbsConnection::OnStaged(std::uint32_t slot, std::uint32_t bytes) {
  if (slot >= limits_.staged_slots || bytes < kWireHeaderBytes || bytes > staged_slot_bytes_) {
    return absl::InvalidArgumentError(absl::StrCat("staged write of ", bytes, " bytes into slot ",
                                                   slot, " from ", peer_, ": out of bounds"));
  }
  const std::byte* at = staged_ring_.data() + std::size_t{slot} * staged_slot_bytes_;
  StatusOr<WireHeader> decoded =
      DecodeWireHeader(std::span<const std::byte, kWireHeaderBytes>(at, kWireHeaderBytes));
  if (!decoded.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed header from ", peer_, ": ", decoded.status().message()));
  }
  const WireHeader header = *decoded;
  if (kWireHeaderBytes + header.payload_bytes != bytes) {
    return absl::InvalidArgumentError(absl::StrCat("staged message from ", peer_, " of ", bytes,
                                                   " bytes whose header says ",
                                                   header.payload_bytes, " + 32"));
  }
  ++stats_.staged_received;
  // Copied out before the handler runs (the slot is the peer's to reuse once credited).
  PHUB_RETURN_IF_ERROR(Deliver(header, std::span<const std::byte>(at + kWireHeaderBytes,
                                                                  header.payload_bytes)));
  ++credits_owed_;
  return absl::OkStatus();
}

Status VerbsConnection::Deliver(const WireHeader& header, std::span<const std::byte> payload) {
  // The handler's one validation point runs for every message, zero-length ones included.
  PHUB_ASSIGN_OR_RETURN(std::span<std::byte> slot_bytes, handler_->ResolveSlot(*this, header));
  if (slot_bytes.size() != payload.size()) {
    return absl::InternalError(absl::StrCat("slot of ", slot_bytes.size(),
                                            " bytes for a payload of ", payload.size()));
  }
  // (The registry is null only after Close.)
  if (loop_.registry != nullptr &&
      loop_.registry->InDeviceMemory(slot_bytes.data(), slot_bytes.size())) {
    return absl::FailedPreconditionError(absl::StrCat(
        OpName(header.op), " of chunk ", header.chunk, " from ", peer_,
        " came staged (no landing zone published for it), and its slot is device memory, which "
        "the CPU never writes: publish a landing zone for it (GPUDirect)"));
  }
  if (!payload.empty()) std::memcpy(slot_bytes.data(), payload.data(), payload.size());
  return handler_->OnReceived(*this, header);
}

Status VerbsConnection::OnDirect(std::uint32_t index, std::uint32_t bytes) {
  if (index >= zones_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("direct write into zone ", index, " from ",
                                                   peer_, "; this side published ",
                                                   zones_.size()));
  }
  LocalZone& zone = zones_[index];
  if (bytes != zone.zone.bytes.size()) {
    return absl::InvalidArgumentError(absl::StrCat("direct write of ", bytes, " bytes from ",
                                                   peer_, " into a zone of ",
                                                   zone.zone.bytes.size()));
  }
  const WireHeader header{zone.zone.op, zone.zone.worker, zone.zone.chunk, zone.next_iteration++,
                          bytes};
  ++stats_.direct_received;
  PHUB_ASSIGN_OR_RETURN(std::span<std::byte> slot, handler_->ResolveSlot(*this, header));
  if (slot.data() != zone.zone.bytes.data() || slot.size() != bytes) {
    return absl::InternalError(absl::StrCat(OpName(header.op), " of chunk ", header.chunk,
                                            " resolved to another place than the landing zone "
                                            "published for it"));
  }
  return handler_->OnReceived(*this, header);
}

void VerbsConnection::ExpectIteration(Op op, std::uint32_t worker, std::uint64_t next) {
  // Ours: what the peer writes next into each such zone.
  for (LocalZone& local : zones_) {
    if (local.zone.op == op && local.zone.worker == worker) local.next_iteration = next;
  }
  // The peer's: what we write next there (checked against each header as it is posted).
  for (const auto& [key, index] : peer_endpoint_.zone_index) {
    if (key >> 32 == (ZoneKey(op, worker, 0) >> 32)) peer_endpoint_.zones[index].next_iteration = next;
  }
}

void VerbsConnection::Close(const Status& why) {
  if (closed_) return;
  closed_ = true;
  closed_why_ = why.ok() ? absl::CancelledError("closed during its set-up") : why;
  // Everything posted is flushed; the flushes come back here and are ignored (closed_).
  if (qp_) (void)qp_->SetError();
  setup_deadline_.reset();
  spdlog::debug("verbs connection to {} closes: sent {} direct ({} of them by copy), {} staged; "
                "received {} direct, {} staged", peer_, stats_.direct_sent, stats_.copied_sent,
                stats_.staged_sent, stats_.direct_received, stats_.staged_received);
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  Status send_error = why.ok() ? absl::CancelledError("connection closed locally") : why;
  std::deque<InFlight> in_flight;
  in_flight.swap(in_flight_);
  std::deque<Pending> pending;
  pending.swap(pending_);
  for (auto& f : in_flight) {
    if (f.done) f.done(send_error);
  }
  for (auto& p : pending) {
    if (p.done) p.done(send_error);
  }
  // Nothing may write our memory any more (the QP is in error): let the registry go, so that
  // a job's regions do not outlive it through a closed connection.
  loop_.registry.reset();
  if (started_) handler_->OnClosed(*this, why);  // callbacks only ever follow Start()
}

}  // namespace phub::transport::verbs
