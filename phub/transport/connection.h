// The chunk mover: the one seam between PHub's logic (server shards, client, ring) and a
// transport (tcp/ now, verbs/ later). A Connection moves header+payload messages to one peer;
// the receiving side decides *before the bytes arrive* where a payload lands
// (ConnectionHandler::ResolveSlot), which is what makes receives zero-copy.
//
// Threading: a connection belongs to one thread (its event loop). Every method must be called
// on that thread and every handler callback is invoked on it. Errors never cross threads as
// exceptions: a failed connection closes, fails its queued sends, and tells its handler once.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/transport/wire_header.h"

namespace phub::transport {

class Connection;

// A place where a payload from the peer lands, known before any message: what transports that
// write straight into the receiver's memory (verbs: RDMA WRITE WITH IMMEDIATE) publish to the
// sender at connection set-up. The message it receives is (op, worker, chunk) with iterations
// first_iteration, first_iteration + 1, ... in order; ResolveSlot still checks each arrival and
// must name the same bytes.
struct LandingZone {
  Op op = Op::kPush;
  std::uint32_t worker = 0;
  std::uint32_t chunk = 0;
  std::uint64_t first_iteration = 0;
  std::span<std::byte> bytes;
};

// Implemented by the layer above. All calls happen on the connection's thread.
class ConnectionHandler {
 public:
  virtual ~ConnectionHandler() = default;

  // A header arrived (any op, any payload length, zero included): the handler's one
  // validation point for the message. Check op, worker, chunk, iteration and size against the
  // handler's state here, before anything is read or written, and return the buffer the
  // payload must be received into: exactly payload_bytes long (empty for no payload). The
  // buffer must stay valid and untouched by anyone else until OnReceived. A non-OK status
  // closes the connection with that reason and no OnReceived follows.
  virtual StatusOr<std::span<std::byte>> ResolveSlot(Connection& connection,
                                                     const WireHeader& header) = 0;

  // The message (header and, if any, payload) is complete; ResolveSlot accepted it just before
  // and nothing else ran on this connection in between. Non-OK closes the connection.
  virtual Status OnReceived(Connection& connection, const WireHeader& header) = 0;

  // The connection closed (peer gone, bad input, or Close()). Called exactly once; no other
  // callback follows. `why` is OK only for a local Close(OkStatus()).
  virtual void OnClosed(Connection& connection, const Status& why) = 0;

  // Every payload this handler will take from `connection`'s peer at a fixed place, for the
  // whole life of the connection. Transports that copy (TCP) never ask; verbs publishes them
  // to the peer, which then writes there directly (zero copy). `attach` is the ATTACH the peer
  // will open with, when it is known before any data (verbs carries it in the set-up): a
  // handler checks it here and publishes only what that peer may write; an error refuses the
  // peer before it learns any address. Messages without a zone still work: verbs stages them
  // through a small receive ring and ResolveSlot + a copy.
  virtual StatusOr<std::vector<LandingZone>> LandingZones(const Connection& connection,
                                                          const WireHeader* attach) {
    return std::vector<LandingZone>{};
  }
};

class Connection {
 public:
  // Runs on the connection's thread once the message left this process (for TCP: handed to
  // the kernel), or with an error if the connection closed first.
  using SendDone = std::function<void(const Status&)>;

  virtual ~Connection() = default;

  // Starts receiving; handler callbacks begin after this.
  virtual void Start() = 0;

  // Queues one message. Does not block. `payload` must stay valid and unmodified until `done`
  // runs (no copy is made). Messages go out in the order they were queued.
  virtual void Send(const WireHeader& header, std::span<const std::byte> payload,
                    SendDone done) = 0;

  // Closes now; queued sends fail with `why`; OnClosed(why) follows. Idempotent.
  virtual void Close(const Status& why) = 0;

  // Runs once, on the connection's thread, when a Finish ends: OK on the peer's end; else why not
  // (DeadlineExceeded past the limit, Unavailable on a reset: what was sent may then be lost).
  using FinishDone = std::function<void(const Status&)>;

  // Leaves without losing what was sent: the peer receives every message queued so far, then
  // the end of the stream; whatever the peer still sends is read and dropped (no handler call
  // for it) until the peer closes its side or `limit` passes. Then the connection closes as
  // Close(OkStatus()) does, and `done` runs. Later sends fail. Close() instead may lose what the
  // peer has not received yet: TCP answers a close with unread bytes in the socket with a reset,
  // which also discards what the closing side's kernel had not delivered (a worker's last pushes
  // and its BYE, with phubd still writing it weights). This default suits transports whose
  // sends complete only once the peer holds the message (verbs: a reliable connection's
  // completion): called after the last send's SendDone, it closes at once.
  virtual void Finish(std::chrono::milliseconds limit, FinishDone done) {
    Close(absl::OkStatus());
    if (done) done(absl::OkStatus());
  }

  virtual bool closed() const = 0;
  // For logs: "127.0.0.1:51234".
  virtual std::string peer() const = 0;
  // The CPU on which the kernel last handled this connection's incoming packets (TCP:
  // SO_INCOMING_CPU), to see whether a NIC's queues are steered to the core that serves the
  // connection; -1 where the transport cannot tell (verbs: the HCA writes memory directly).
  virtual int receive_cpu() const { return -1; }
  // From now on the next message of `op` for `worker` (every chunk, both ways) carries
  // iteration `next`. A joiner of an elastic job attaches before it learns its first
  // iteration, so the zones published at set-up (LandingZone::first_iteration) name a guess;
  // both ends learn the iteration from the control plane before the first such message and say
  // so here. Transports whose headers travel with the payload (TCP) need nothing; one that
  // infers iterations from order (verbs' landing zones) moves its counts.
  virtual void ExpectIteration(Op op, std::uint32_t worker, std::uint64_t next) {}

  // Free for the handler's use (a shard stores the worker rank once attached; -1 before).
  std::int64_t tag() const { return tag_; }
  void set_tag(std::int64_t tag) { tag_ = tag; }

 private:
  std::int64_t tag_ = -1;
};

}  // namespace phub::transport
