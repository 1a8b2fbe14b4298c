// A Connection to a process on the same host through shared memory (shm_ring.h): a send copies
// header + payload into the ring the peer reads, a receive copies them out of the other ring
// straight into the slot the handler names (ResolveSlot), as TCP reads into it. No kernel on
// the data path, so no socket buffers, no segments, no per-packet wake-ups: on loopback this
// is what TCP costs twice over (docs/benchmarks.md).
//
// Wake-ups: each side has a bell (an eventfd, awaited through Asio like a socket). A side with
// nothing left to do sets its "waiting" word and checks the rings once more before it sleeps;
// a side that publishes reads the peer's word and rings only if it is set, so two busy sides
// copy without a syscall between them. The set-up socket stays open and silent: its end is the
// peer's end, a crash included. Lives on the thread of its io_context, as TcpConnection does.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/local/stream_protocol.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <memory>
#include <optional>

#include "phub/transport/connection.h"
#include "phub/transport/finishing.h"
#include "phub/transport/shm/shm_ring.h"
#include "phub/transport/shm/shm_setup.h"

namespace phub::transport::shm {

class ShmConnection final : public Connection,
                            public std::enable_shared_from_this<ShmConnection> {
 public:
  // `socket`: the set-up socket, the connection's liveness from now on. `handler` must outlive
  // the OnClosed callback. `peer` is what peer() says ("local:<pid>").
  static std::shared_ptr<ShmConnection> Create(boost::asio::io_context& context, Side side,
                                               Endpoint endpoint, UniqueFd socket,
                                               ConnectionHandler* handler, std::string peer);

  // The dialer's first message (its ATTACH), into the empty ring before the connection is its
  // loop's; rings the acceptor.
  void WriteFirst(const WireHeader& header);

  void Start() override;
  void Send(const WireHeader& header, std::span<const std::byte> payload,
            SendDone done) override;
  void Close(const Status& why) override;
  // Ends its ring (the peer reads everything, then the end) and drops what the peer still
  // sends until the peer's end or `limit`: connection.h.
  void Finish(std::chrono::milliseconds limit, FinishDone done) override;
  bool closed() const override { return closed_; }
  std::string peer() const override { return peer_; }

 private:
  struct PendingSend {
    EncodedHeader header;
    std::span<const std::byte> payload;
    SendDone done;
    std::size_t copied = 0;  // of header + payload
  };

  ShmConnection(boost::asio::io_context& context, Side side, Endpoint endpoint, UniqueFd socket,
                ConnectionHandler* handler, std::string peer);
  // Copies both ways until there is nothing to do (then sleeps on the bell) or this turn's
  // share of the loop is used (then comes back after the loop's other work).
  void Pump();
  // Pump on a later turn of the loop (once, however often asked before it runs).
  void SchedulePump();
  // Each returns false once the connection closed (a handler may close it).
  bool ReceiveSome(std::size_t& budget);
  bool SendSome(std::size_t& budget);
  bool TakeHeader();
  bool TakePayload();
  void ArmBell();
  void WatchPeer();
  void OnPeerGone(const std::string& how);
  void RingPeer(bool always);
  void SetWaiting(bool waiting);
  bool Draining() const { return finishing_ && finishing_->writing_ended; }
  void EndWriting();
  void EndFinish(const Status& how);
  // A ring position the peer made impossible (shm_ring.h): closes, naming the peer.
  void CloseCorrupt(const Status& ring);

  Side side_;
  Endpoint endpoint_;
  RingWriter writer_;
  RingReader reader_;
  boost::asio::posix::stream_descriptor bell_;
  boost::asio::local::stream_protocol::socket socket_;
  ConnectionHandler* handler_;
  std::string peer_;

  EncodedHeader header_bytes_{};
  std::size_t header_have_ = 0;
  WireHeader header_;
  std::span<std::byte> slot_;  // the payload's destination while in_payload_
  std::size_t payload_have_ = 0;
  bool in_payload_ = false;

  std::deque<PendingSend> queue_;
  bool pumping_ = false;
  bool pump_scheduled_ = false;
  bool started_ = false;
  bool closed_ = false;
  bool peer_gone_ = false;
  std::unique_ptr<Finishing> finishing_;
};

}  // namespace phub::transport::shm
