// VerbsConnection's set-up (verbs_connection.h): the queue pair, staged ring and landing zones
// prepared, endpoints exchanged over the TCP side channel, and the "ready" byte; the dialer
// blocks its caller, the acceptor runs on the loop under one deadline. The data path is in
// verbs_connection.cc.
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "phub/transport/control_channel.h"
#include "phub/transport/verbs/immediate.h"
#include "phub/transport/verbs/verbs_connection.h"

namespace phub::transport::verbs {

namespace asio = boost::asio;

StatusOr<VerbsLoop> OpenVerbsLoop(std::shared_ptr<const VerbsDevice> device,
                                  asio::io_context& context, int queue) {
  VerbsLoop loop;
  PHUB_ASSIGN_OR_RETURN(loop.poller, CompletionPoller::Create(*device, context, 16384, queue));
  loop.registry = std::make_shared<MemoryRegistry>(device);
  loop.device = std::move(device);
  return loop;
}

VerbsConnection::VerbsConnection(asio::ip::tcp::socket socket, VerbsLoop loop,
                                 ConnectionHandler* handler, const VerbsLimits& limits)
    : loop_(std::move(loop)), socket_(std::move(socket)), handler_(handler), limits_(limits) {
  boost::system::error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  peer_ = absl::StrCat(ec ? "unknown peer" : absl::StrCat(endpoint.address().to_string(), ":",
                                                          endpoint.port()),
                       " via ", loop_.device->name());
}

Status VerbsConnection::Prepare(const WireHeader* peer_attach) {
  if (limits_.send_depth == 0 || limits_.recv_depth == 0 || limits_.staged_slots == 0 ||
      limits_.send_buffers == 0 || limits_.staged_slots > kIndexMask ||
      limits_.max_send_payload_bytes == 0 || limits_.max_send_payload_bytes > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(
        "VerbsLimits: every depth and count must be positive, and the largest payload sent "
        "within the wire header's limit");
  }
  staged_slot_bytes_ = static_cast<std::uint32_t>(
      RoundUp64(kWireHeaderBytes + std::size_t{limits_.staged_payload_bytes}));
  staged_ring_.assign(std::size_t{limits_.staged_slots} * staged_slot_bytes_, std::byte{0});
  PHUB_ASSIGN_OR_RETURN(staged_ring_mr_, MemoryRegion::Register(*loop_.device, staged_ring_,
                                                                IBV_ACCESS_REMOTE_WRITE));
  PHUB_ASSIGN_OR_RETURN(qp_, QueuePair::Create(*loop_.device, loop_.poller->cq(),
                                               loop_.poller->cq(),
                                               QpCapacity{limits_.send_depth, limits_.recv_depth}));
  PHUB_ASSIGN_OR_RETURN(std::vector<LandingZone> zones,
                        handler_->LandingZones(*this, peer_attach));
  for (LandingZone& zone : zones) {
    if (loop_.registry->Find(zone.bytes.data(), zone.bytes.size()) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "landing zone of ", OpName(zone.op), " chunk ", zone.chunk, " (", zone.bytes.size(),
          " bytes) is not in registered memory: register the owner's buffers first"));
    }
    zones_.push_back(LocalZone{zone, zone.first_iteration});
  }
  if (zones_.size() > kIndexMask) {
    return absl::InvalidArgumentError(absl::StrCat(zones_.size(), " landing zones; at most ",
                                                   kIndexMask, " fit the immediate"));
  }
  return loop_.poller->Attach(qp_->qpn(), weak_from_this(),
                              static_cast<int>(limits_.send_depth + limits_.recv_depth));
}

proto::ControlMessage VerbsConnection::LocalEndpoint() const {
  std::vector<PublishedZone> published;
  published.reserve(zones_.size());
  for (const LocalZone& z : zones_) {
    published.push_back({z.zone, loop_.registry->Find(z.zone.bytes.data(), z.zone.bytes.size())->rkey()});
  }
  StagedRing ring{staged_ring_mr_.remote_address(), staged_ring_mr_.rkey(), limits_.staged_slots,
                  staged_slot_bytes_};
  return EncodeEndpoint(qp_->address(), ring, published, attach_);
}

Status VerbsConnection::ConnectQp() {
  PHUB_RETURN_IF_ERROR(qp_->Connect(peer_endpoint_.qp));
  for (std::uint32_t i = 0; i < limits_.recv_depth; ++i) PHUB_RETURN_IF_ERROR(qp_->PostReceive(0));
  credits_ = peer_endpoint_.ring.slots;
  // What we send, not what the peer publishes: a staged copy is a header and a payload.
  send_buffer_bytes_ = RoundUp64(kWireHeaderBytes + limits_.max_send_payload_bytes);
  return absl::OkStatus();
}

StatusOr<std::shared_ptr<VerbsConnection>> VerbsConnection::Dial(
    asio::ip::tcp::socket socket, VerbsLoop loop, ConnectionHandler* handler,
    const VerbsLimits& limits, std::optional<WireHeader> attach) {
  std::shared_ptr<VerbsConnection> c(
      new VerbsConnection(std::move(socket), std::move(loop), handler, limits));
  c->attach_ = attach;
  PHUB_RETURN_IF_ERROR(c->Prepare(nullptr));
  PHUB_RETURN_IF_ERROR(WriteControlMessage(c->socket_, c->LocalEndpoint()));
  PHUB_ASSIGN_OR_RETURN(proto::ControlMessage reply, ReadControlMessage(c->socket_));
  PHUB_ASSIGN_OR_RETURN(c->peer_endpoint_, DecodeEndpoint(reply));
  PHUB_RETURN_IF_ERROR(c->ConnectQp());
  // Our receives are posted: the acceptor may write from now on.
  boost::system::error_code ec;
  asio::write(c->socket_, asio::buffer(&c->side_byte_, 1), ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("verbs set-up with ", c->peer_, ": the peer left: ", ec.message()));
  }
  return c;
}

std::shared_ptr<VerbsConnection> VerbsConnection::Accept(asio::ip::tcp::socket socket,
                                                         VerbsLoop loop, HandlerNow handler_now,
                                                         const VerbsLimits& limits,
                                                         Accepted done) {
  std::shared_ptr<VerbsConnection> c(
      new VerbsConnection(std::move(socket), std::move(loop), nullptr, limits));
  // One deadline for the whole set-up, from here to the dialer's "ready": a peer that connects
  // and says nothing holds the socket no longer than one that stops half-way holds its QP and
  // completion-queue entries.
  c->ArmSetupDeadline();
  AsyncReadControlMessage(c->socket_, [c, handler_now, done](
                                               StatusOr<proto::ControlMessage> message) {
    if (c->closed_) return done(c->closed_why_);
    Status status = message.status();
    if (status.ok()) {
      auto peer = DecodeEndpoint(*message);
      if (peer.ok()) c->peer_endpoint_ = std::move(*peer);
      status = peer.status();
    }
    if (status.ok()) {
      c->handler_ = handler_now();
      if (c->handler_ == nullptr) {
        status = absl::CancelledError("nobody takes the connection any more (the job ended)");
      }
    }
    // The handler sees who the dialer says it is before any address of ours goes out.
    if (status.ok()) {
      status = c->Prepare(c->peer_endpoint_.attach ? &*c->peer_endpoint_.attach : nullptr);
    }
    if (status.ok()) status = c->ConnectQp();
    if (!status.ok()) {
      // Tell the dialer why (best effort, a small message), so its Dial fails with the reason.
      proto::ControlMessage refusal;
      refusal.mutable_error()->set_message(std::string(status.message()));
      refusal.mutable_error()->set_fix("see the acceptor's log");
      (void)WriteControlMessage(c->socket_, refusal);
      return done(status);
    }
    auto framed = FrameControlMessage(c->LocalEndpoint());
    asio::async_write(c->socket_, asio::buffer(*framed),
                      [c, framed, done](const boost::system::error_code& ec, std::size_t) {
      if (ec) return done(absl::UnavailableError(absl::StrCat("verbs set-up with ", c->peer_, ": ", ec.message())));
      asio::async_read(c->socket_, asio::buffer(&c->side_byte_, 1),
                       [c, done](const boost::system::error_code& ec, std::size_t) {
        c->setup_deadline_.reset();  // cancels it
        if (c->closed_) return done(c->closed_why_);  // timed out, or closed by the owner
        if (ec) {
          return done(absl::UnavailableError(
              absl::StrCat("verbs set-up with ", c->peer_, ": the peer left: ", ec.message())));
        }
        done(c);
      });
    });
  });
  return c;
}

void VerbsConnection::ArmSetupDeadline() {
  const auto timeout = std::chrono::milliseconds(limits_.setup_timeout_ms);
  setup_deadline_ = std::make_unique<asio::steady_timer>(socket_.get_executor(), timeout);
  setup_deadline_->async_wait([weak = weak_from_this(), timeout](
                                  const boost::system::error_code& ec) {
    auto self = weak.lock();
    if (ec || !self || self->closed_) return;
    self->Close(absl::DeadlineExceededError(
        absl::StrCat("verbs set-up with ", self->peer_, ": the peer did not finish it within ",
                     timeout.count(), " ms")));
  });
}

}  // namespace phub::transport::verbs
