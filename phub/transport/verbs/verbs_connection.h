// Connection over one RC queue pair (connection.h's semantics, on RDMA). Every message is an
// RDMA WRITE WITH IMMEDIATE; the immediate says which of two paths it took:
//
//  - direct: the receiver published a LandingZone for (op, worker, chunk) at set-up (a shard's
//    slot for that worker's push, a client's weight buffer for that chunk), so the payload is
//    written straight there and the immediate is the zone's index. The receiver rebuilds the
//    header from the zone (iterations follow in order on an RC QP) and runs ResolveSlot (which
//    must name the same bytes) and OnReceived as on TCP. Zero copy on the receiver; zero copy
//    on the sender when the payload lies in memory its owner registered (MemoryRegistry),
//    one copy into a registered send buffer otherwise.
//  - staged: anything else (BYE, ERROR, the ring's pieces): header + payload go into one
//    slot of the receiver's staged ring, and ResolveSlot's buffer gets a copy. The sender holds
//    one credit per slot; the receiver returns a credit (a zero-length write, immediate =
//    credit) once it has copied the slot out, so no write ever lands in a slot still in use.
//
// Device memory (MemoryRegistry::RegisterDevice: a GPU's, GPUDirect RDMA) travels only on the
// direct path, read and written by the NIC alone: a message that would be staged or copied from
// it, or staged into a slot in it, fails with FailedPrecondition; the CPU never touches it.
//
// Flow control of direct writes is the PS's iteration protocol (docs/protocol.md): a worker
// pushes chunk k again only after the weights answering its last push arrived, which phubd
// sends only after aggregating; phubd overwrites a worker's weights only after that worker
// pushed again. A peer that breaks it is caught by ResolveSlot and disconnected.
//
// Liveness: a TCP "side channel" carries the set-up and then stays open; its end is how a
// dead peer is noticed (soft-RoCE never times out a write to a vanished peer), after which the
// QP is put in error so everything posted is flushed. Send completions are remote
// acknowledgements: SendDone means the bytes are in the peer's memory.
//
// Threading: as connection.h; Dial blocks its (non-loop) caller, Accept runs on the loop.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "phub/transport/connection.h"
#include "phub/transport/verbs/completion_poller.h"
#include "phub/transport/verbs/memory_registry.h"
#include "phub/transport/verbs/verbs_endpoint.h"

namespace phub::transport::verbs {

struct VerbsLimits {
  std::uint32_t send_depth = 64;       // RDMA writes posted at once (more wait in a queue)
  std::uint32_t recv_depth = 128;      // receives posted (one per incoming write)
  std::uint32_t staged_slots = 8;      // staged messages the peer may have in flight to us
  std::uint32_t staged_payload_bytes = 4096;  // the largest staged payload we accept
  std::uint32_t send_buffers = 8;      // registered buffers for payloads sent by copy
  // The largest payload this side ever sends (its chunk or piece size). Send buffers are sized
  // by it, never by the zones or slots the peer publishes (a peer's claim allocates nothing);
  // a larger payload is refused.
  std::uint64_t max_send_payload_bytes = 1 << 20;
  int setup_timeout_ms = 30000;        // acceptor: from accept to the dialer's "ready"
};

// What the connections of one event loop share: the device, the loop's completion queue and
// the memory its owner registered (may be empty).
struct VerbsLoop {
  std::shared_ptr<const VerbsDevice> device;
  std::shared_ptr<CompletionPoller> poller;
  std::shared_ptr<MemoryRegistry> registry;
};

// Opens the loop's completion poller (on `context`, signalled on the device's completion
// vector `queue`, modulo their number) and an empty registry for `device`.
StatusOr<VerbsLoop> OpenVerbsLoop(std::shared_ptr<const VerbsDevice> device,
                                  boost::asio::io_context& context, int queue = 0);

// Per-connection counters, for tests and benchmarks.
struct VerbsConnectionStats {
  std::uint64_t direct_sent = 0;   // writes straight into a peer's landing zone
  std::uint64_t copied_sent = 0;   // of those, payloads copied first (unregistered memory)
  std::uint64_t staged_sent = 0;   // writes into the peer's staged ring
  std::uint64_t direct_received = 0;
  std::uint64_t staged_received = 0;
};

class VerbsConnection final : public Connection,
                              public CompletionPoller::Sink,
                              public std::enable_shared_from_this<VerbsConnection> {
 public:
  // The dialing side: runs the whole set-up on the calling thread over `socket` (connected to
  // the acceptor; must not be the loop's thread). Returns a connection ready to Start().
  // `attach`: the ATTACH this side opens with; it travels in the set-up, so the acceptor checks
  // it (and publishes only that peer's zones) before the peer learns any address, and the
  // acceptor's handler receives it as the first message.
  static StatusOr<std::shared_ptr<VerbsConnection>> Dial(
      boost::asio::ip::tcp::socket socket, VerbsLoop loop, ConnectionHandler* handler,
      const VerbsLimits& limits = {}, std::optional<WireHeader> attach = std::nullopt);

  // The accepting side: runs the set-up asynchronously on the socket's loop; `done` runs there
  // with a connection ready to Start(), or why the set-up failed. `handler_now` is asked for
  // the handler once the dialer's endpoint is in (null: it went away meanwhile, e.g. the job
  // ended; the set-up then fails). Returns the connection being set up, so its owner can
  // Close() it if it must go first (e.g. the job ends); `done` then gets an error.
  using HandlerNow = std::function<ConnectionHandler*()>;
  using Accepted = std::function<void(StatusOr<std::shared_ptr<VerbsConnection>>)>;
  static std::shared_ptr<VerbsConnection> Accept(boost::asio::ip::tcp::socket socket,
                                                 VerbsLoop loop, HandlerNow handler_now,
                                                 const VerbsLimits& limits, Accepted done);

  ~VerbsConnection() override;

  void Start() override;
  void Send(const WireHeader& header, std::span<const std::byte> payload,
            SendDone done) override;
  void Close(const Status& why) override;
  bool closed() const override { return closed_; }
  std::string peer() const override { return peer_; }
  void ExpectIteration(Op op, std::uint32_t worker, std::uint64_t next) override;

  const VerbsConnectionStats& stats() const { return stats_; }

  // CompletionPoller::Sink
  void OnCompletion(const ibv_wc& completion) override;
  void OnCompletionQueueFailed(const Status& why) override { Close(why); }

 private:
  struct Pending {
    WireHeader header;
    std::span<const std::byte> payload;
    SendDone done;
  };
  struct InFlight {
    std::uint64_t wr_id;
    SendDone done;
    int buffer;  // send buffer to give back, -1 if none
  };
  struct LocalZone {
    LandingZone zone;
    std::uint64_t next_iteration;
  };

  VerbsConnection(boost::asio::ip::tcp::socket socket, VerbsLoop loop, ConnectionHandler* handler,
                  const VerbsLimits& limits);
  Status Prepare(const WireHeader* peer_attach);  // QP, staged ring, zones, poller route
  proto::ControlMessage LocalEndpoint() const;
  Status ConnectQp();  // to peer_endpoint_: QP to RTS, receives posted
  void WatchSideChannel();
  void Pump();
  Status PostNext(Pending& next, bool& blocked);
  StatusOr<int> TakeSendBuffer();  // -1: all in use
  void ArmSetupDeadline();         // acceptor: closes the connection if set-up outlasts it
  void OnReceive(const ibv_wc& completion);
  Status OnStaged(std::uint32_t slot, std::uint32_t bytes);
  Status OnDirect(std::uint32_t zone, std::uint32_t bytes);
  // ResolveSlot (the handler's validation point), the payload copied there, OnReceived.
  Status Deliver(const WireHeader& header, std::span<const std::byte> payload);

  VerbsLoop loop_;  // first: the CQ must outlive the QP
  boost::asio::ip::tcp::socket socket_;
  ConnectionHandler* handler_;
  VerbsLimits limits_;
  std::string peer_;

  std::unique_ptr<QueuePair> qp_;
  std::vector<std::byte> staged_ring_;  // what the peer writes staged messages into
  MemoryRegion staged_ring_mr_;
  std::uint32_t staged_slot_bytes_ = 0;
  std::vector<LocalZone> zones_;         // ours, by index (the immediate)
  PeerEndpoint peer_endpoint_;
  std::optional<WireHeader> attach_;     // ours, sent in the set-up (dialer)

  std::vector<std::byte> send_pool_;     // send_buffers x send_buffer_bytes_, on first need
  MemoryRegion send_pool_mr_;
  std::size_t send_buffer_bytes_ = 0;
  std::vector<int> free_buffers_;

  std::deque<Pending> pending_;
  std::deque<InFlight> in_flight_;
  std::uint64_t next_wr_id_ = 1;
  std::uint32_t credits_ = 0;            // staged slots of the peer's we may write
  std::uint32_t next_peer_slot_ = 0;
  std::uint32_t credits_owed_ = 0;       // staged slots we emptied and not yet announced
  std::vector<ibv_wc> before_start_;  // completions that came before Start
  std::unique_ptr<boost::asio::steady_timer> setup_deadline_;  // acceptor, until "ready"
  char side_byte_ = 0;
  bool started_ = false;
  bool closed_ = false;
  Status closed_why_;  // what Close() said, for a set-up it ends
  VerbsConnectionStats stats_;
};

}  // namespace phub::transport::verbs
