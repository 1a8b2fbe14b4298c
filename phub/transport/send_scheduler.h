// SendScheduler: priority scheduling of one Connection's sends, at chunk granularity.
//
// Layer-wise overlap pushes gradients in backward order, so without it the first layers'
// chunks (produced last by backward, needed first by the next forward) queue behind the large
// late layers (ByteScheduler, SOSP'19). The scheduler holds messages back and hands the
// connection at most `window_bytes` of payload that it has not finished sending; each time a
// send completes, the most urgent message held back goes next. So a chunk queued late still
// overtakes every chunk that has not left yet: the preemption is real on a full link, not only
// in a queue that the link drains in order anyway.
//
// Order: data messages (PUSH, INIT, WEIGHTS) by (iteration, chunk): the earlier iteration
// first, then the lower chunk id, i.e. the earlier tensor (the key table numbers chunks in
// the model's tensor order, which is its forward order); equal keys in the order queued. Every
// other op (BYE, ERROR, ...) is a barrier: it goes after everything queued before it and
// before everything queued after it. One chunk's messages keep their iteration order, which
// is what receivers (and verbs' landing zones) require.
//
// window_bytes = 0 disables holding back: every message goes to the connection at once, in the
// order queued (what Connection::Send alone does).
//
// Where the connection queues further down, the window must bound that too: on TCP the
// socket's send buffer is such a queue (a send completes once the kernel took the bytes), so
// connections meant for scheduling set TCP_NOTSENT_LOWAT (SocketTuning::notsent_lowat_bytes).
//
// Threading: the connection's thread only, like the connection. Lifetime: owned by whoever
// owns the connection; completions that arrive after the scheduler is gone still reach their
// callers (the scheduler is held by shared_ptr and its callbacks hold it weakly).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include "phub/transport/connection.h"
#include "phub/transport/send_window.h"

namespace phub::transport {

class SendScheduler : public std::enable_shared_from_this<SendScheduler> {
 public:
  static std::shared_ptr<SendScheduler> Create(std::shared_ptr<Connection> connection,
                                               std::size_t window_bytes);

  // As Connection::Send: does not block, `payload` must stay valid and unmodified until `done`
  // runs, `done` runs exactly once (with the connection's error if it closed first).
  void Send(const WireHeader& header, std::span<const std::byte> payload,
            Connection::SendDone done);

  const std::shared_ptr<Connection>& connection() const { return connection_; }
  std::size_t window_bytes() const { return window_bytes_; }
  // Messages held back, and payload bytes handed to the connection and not yet completed.
  std::size_t held() const { return held_.size(); }
  std::size_t in_flight_bytes() const { return in_flight_bytes_; }

 private:
  // (epoch, iteration, chunk, sequence): the order messages leave in.
  using Key = std::tuple<std::uint64_t, std::uint64_t, std::uint32_t, std::uint64_t>;
  struct Held {
    WireHeader header;
    std::span<const std::byte> payload;
    Connection::SendDone done;
  };

  SendScheduler(std::shared_ptr<Connection> connection, std::size_t window_bytes)
      : connection_(std::move(connection)), window_bytes_(window_bytes) {}
  Key KeyOf(const WireHeader& header);
  // Hands messages to the connection while the window has room (always at least one).
  void Pump();
  void Release(const WireHeader& header, std::span<const std::byte> payload,
               Connection::SendDone done);

  std::shared_ptr<Connection> connection_;
  std::size_t window_bytes_;
  std::map<Key, Held> held_;
  std::size_t in_flight_bytes_ = 0;
  std::size_t in_flight_ = 0;  // messages handed over and not completed
  std::uint64_t epoch_ = 0;
  std::uint64_t sequence_ = 0;
  bool pumping_ = false;
};

}  // namespace phub::transport
