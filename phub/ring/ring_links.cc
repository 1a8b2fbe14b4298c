#include "phub/ring/ring_links.h"

#include "absl/strings/str_cat.h"
#include "phub/rendezvous/rendezvous.h"
#include "phub/ring/peer_address.h"
#include "phub/transport/open_device.h"

namespace phub::ring {

namespace {
// Every piece goes outside a landing zone (its place in the caller's buffer changes with every
// call, and the reduce-scatter's lands in scratch): room for eight pieces in flight per link.
transport::ConnectionSizing PieceSizing(std::uint64_t piece_bytes) {
  transport::ConnectionSizing sizing;
  sizing.max_send_bytes = piece_bytes;
  sizing.max_unplaced_bytes = static_cast<std::uint32_t>(piece_bytes);
  sizing.unplaced_in_flight = 8;
  sizing.send_copies = 8;
  return sizing;
}
// Publishes this rank's address and looks up rank+1's through the rendezvous. TCP's rank 0
// serves the store until every rank has looked its neighbour up (Finish).
StatusOr<PeerAddress> MeetNeighbour(const RingOptions& options, Membership membership,
                                    std::uint16_t port) {
  const std::uint32_t rank = membership.rank;
  const std::uint32_t next = (rank + 1) % membership.world_size;
  auto in_ring = [rank](const Status& s) {
    return Status(s.code(), absl::StrCat("ring rank ", rank, ": ", s.message()));
  };
  auto store = rendezvous::OpenStore(
      {options.rendezvous, rank, membership.world_size, options.connect_timeout_ms});
  if (!store.ok()) return in_ring(store.status());
  if (Status s = PublishPeerAddress(**store, rank, {options.listen_host, port}); !s.ok()) {
    return in_ring(s);
  }
  auto address = LookupPeerAddress(**store, next, options.connect_timeout_ms);
  if (!address.ok()) return in_ring(address.status());
  if (Status s = (*store)->Finish(); !s.ok()) return in_ring(s);
  return address;
}
}  // namespace

Status OpenRingLinks(const RingOptions& options, Membership membership,
                     transport::EventLoop& loop,
                     transport::ConnectionHandler* handler,
                     std::function<void(std::shared_ptr<transport::Connection>)> adopt,
                     RingLinks& links) {
  const std::uint32_t rank = membership.rank;
  const std::uint32_t next = (rank + 1) % membership.world_size;
  const std::uint64_t piece_bytes = options.piece_bytes;
  auto device = transport::OpenDevice({options.transport, {}, options.rdma});
  if (!device.ok()) {
    return Status(device.status().code(),
                  absl::StrCat("ring rank ", rank, ": ", device.status().message()));
  }
  Status status;
  loop.Run([&] {
    auto transport = (*device)->Bind(loop);
    if (!transport.ok()) {
      status = transport.status();
      return;
    }
    links.transport = std::move(*transport);
    transport::AcceptHooks hooks;
    hooks.admit = [piece_bytes](std::size_t) { return PieceSizing(piece_bytes); };
    hooks.handler_now = [handler] { return handler; };
    hooks.ready = std::move(adopt);
    hooks.setup_timeout_ms = options.connect_timeout_ms;
    auto acceptor = links.transport->Listen(options.listen_host, 0, std::move(hooks));
    if (!acceptor.ok()) {
      status = acceptor.status();
      return;
    }
    links.acceptor = std::move(*acceptor);
  });
  PHUB_RETURN_IF_ERROR(status);

  PHUB_ASSIGN_OR_RETURN(PeerAddress address,
                        MeetNeighbour(options, membership, links.acceptor->port()));
  transport::DialRequest request{address.host, address.port, options.connect_timeout_ms,
                                 transport::WireHeader{transport::Op::kAttach, rank, next, 0, 0},
                                 PieceSizing(piece_bytes)};
  auto connection = links.transport->Dial(request, handler);
  if (!connection.ok()) {
    return Status(connection.status().code(), absl::StrCat("ring rank ", rank, ": link to rank ",
                                                           next, ": ",
                                                           connection.status().message()));
  }
  loop.Run([&] {
    links.next = *std::move(connection);
    links.next->set_tag(next);
    links.next->Start();
  });
  return absl::OkStatus();
}

}  // namespace phub::ring
