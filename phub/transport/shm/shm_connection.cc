#include "phub/transport/shm/shm_connection.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <boost/asio/post.hpp>
#include <limits>

#include "absl/strings/str_cat.h"

namespace phub::transport::shm {

namespace asio = boost::asio;

namespace {
// Bytes one turn copies (both ways together) before the loop's other connections get theirs:
// ~0.2 ms of memcpy, a few chunks.
constexpr std::size_t kTurnBytes = std::size_t{2} << 20;

std::uint64_t* WaitingWord(std::span<std::byte> mapping, int side) {
  return &reinterpret_cast<ControlPage*>(mapping.data())->waiting[side].value;
}
}  // namespace

std::shared_ptr<ShmConnection> ShmConnection::Create(asio::io_context& context, Side side,
                                                     Endpoint endpoint, UniqueFd socket,
                                                     ConnectionHandler* handler,
                                                     std::string peer) {
  return std::shared_ptr<ShmConnection>(new ShmConnection(
      context, side, std::move(endpoint), std::move(socket), handler, std::move(peer)));
}

ShmConnection::ShmConnection(asio::io_context& context, Side side, Endpoint endpoint,
                             UniqueFd socket, ConnectionHandler* handler, std::string peer)
    : side_(side),
      endpoint_(std::move(endpoint)),
      writer_(RingIn(endpoint_.mapping(), endpoint_.ring_bytes(), SendRingOf(side))),
      reader_(RingIn(endpoint_.mapping(), endpoint_.ring_bytes(), ReceiveRingOf(side))),
      bell_(context, endpoint_.my_bell().release()),
      socket_(context, asio::local::stream_protocol(), socket.release()),
      handler_(handler),
      peer_(std::move(peer)) {}

void ShmConnection::WriteFirst(const WireHeader& header) {
  const EncodedHeader bytes = EncodeWireHeader(header);
  // The ring is empty and far larger than a header: it all fits.
  writer_.Write(bytes, writer_.Free().value_or(0));
  writer_.Publish();
  RingPeer(/*always=*/true);
}

void ShmConnection::Start() {
  started_ = true;
  ArmBell();
  WatchPeer();
  // Handler callbacks never run inside Start (as with TCP, whose first read completes later).
  SchedulePump();
}

void ShmConnection::ArmBell() {
  bell_.async_wait(asio::posix::descriptor_base::wait_read,
                   [self = shared_from_this()](const boost::system::error_code& ec) {
                     if (ec || self->closed_) return;
                     std::uint64_t rung = 0;
                     // Resets the count; EAGAIN (a spurious wake) is harmless.
                     [[maybe_unused]] ssize_t n = ::read(self->bell_.native_handle(), &rung, sizeof(rung));
                     self->SetWaiting(false);
                     self->Pump();
                     if (!self->closed_) self->ArmBell();
                   });
}

void ShmConnection::WatchPeer() {
  socket_.async_wait(asio::socket_base::wait_read,
                     [self = shared_from_this()](const boost::system::error_code& ec) {
                       if (self->closed_ || ec == asio::error::operation_aborted) return;
                       if (ec) return self->OnPeerGone(ec.message());
                       char byte;
                       const ssize_t n = ::recv(self->socket_.native_handle(), &byte, 1,
                                                MSG_PEEK | MSG_DONTWAIT);
                       if (n == 0) return self->OnPeerGone("its end of the set-up socket closed");
                       if (n < 0 && (errno == EAGAIN || errno == EINTR)) return self->WatchPeer();
                       if (n < 0) return self->OnPeerGone(std::strerror(errno));
                       self->Close(absl::InvalidArgumentError(absl::StrCat(
                           "peer ", self->peer_, " wrote to the shm set-up socket after the set-up; "
                           "nothing may travel there: is it phub's?")));
                     });
}

void ShmConnection::SetWaiting(bool waiting) {
  std::atomic_ref<std::uint64_t>(*WaitingWord(endpoint_.mapping(), static_cast<int>(side_)))
      .store(waiting ? 1 : 0, std::memory_order_seq_cst);
}

void ShmConnection::RingPeer(bool always) {
  if (!always && std::atomic_ref<std::uint64_t>(*WaitingWord(endpoint_.mapping(), PeerOf(side_)))
                         .load(std::memory_order_seq_cst) == 0) {
    return;
  }
  const std::uint64_t one = 1;
  // EAGAIN: the count is at its maximum, the peer will wake anyway.
  [[maybe_unused]] ssize_t n = ::write(endpoint_.peer_bell().get(), &one, sizeof(one));
}

void ShmConnection::SchedulePump() {
  if (pump_scheduled_ || closed_) return;
  pump_scheduled_ = true;
  asio::post(bell_.get_executor(), [self = shared_from_this()] {
    self->pump_scheduled_ = false;
    self->Pump();
  });
}

void ShmConnection::Pump() {
  if (closed_ || pumping_) return;  // a callback's Send inside a turn is taken by that turn
  pumping_ = true;
  std::size_t budget = kTurnBytes;
  while (true) {
    const std::size_t before = budget;
    if (!ReceiveSome(budget) || !SendSome(budget)) return;  // closed; pumping_ no longer matters
    if (budget == before || budget == 0) break;
  }
  pumping_ = false;
  if (budget == 0) {
    SchedulePump();
    return;
  }
  // Sleep, unless the peer published or freed something since the last look: it saw our word
  // clear then and did not ring.
  SetWaiting(true);
  StatusOr<std::size_t> available = reader_.Available();
  StatusOr<std::size_t> free = writer_.Free();
  // A position the peer forged is an end here, whether or not this side has anything to send:
  // taken for "more to do" it had this side post itself for good (found by shm_stream_fuzzer).
  for (const Status& s : {available.status(), free.status()}) {
    if (!s.ok()) return CloseCorrupt(s);
  }
  const bool more = (started_ && *available > 0) ||
                    (started_ && reader_.PeerEnded() && !peer_gone_) ||
                    (!queue_.empty() && *free > 0);
  if (more) {
    SetWaiting(false);
    SchedulePump();
  }
}

bool ShmConnection::ReceiveSome(std::size_t& budget) {
  if (!started_) return true;  // no handler callback before Start()
  while (budget > 0) {
    // The end flag first: the producer sets it after publishing its last byte, so an end seen
    // with nothing available is the end, never bytes still on their way.
    const bool ended = reader_.PeerEnded();
    StatusOr<std::size_t> available = reader_.Available();
    if (!available.ok()) {
      CloseCorrupt(available.status());
      return false;
    }
    if (*available == 0) {
      if (!ended || peer_gone_) return true;  // peer_gone_: OnPeerGone says how it ended
      if (Draining()) {
        EndFinish(absl::OkStatus());
      } else {
        Close(absl::UnavailableError(absl::StrCat("peer ", peer_, " closed the connection (end of "
                                                  "its shm stream while reading ",
                                                  in_payload_ ? "a payload)" : "a header)")));
      }
      return false;
    }
    std::size_t n = 0;
    if (Draining()) {
      n = reader_.Skip(*available, *available);
    } else if (!in_payload_) {
      n = reader_.Read(std::span(header_bytes_).subspan(header_have_), *available);
      header_have_ += n;
    } else {
      n = reader_.Read(slot_.subspan(payload_have_), *available);
      payload_have_ += n;
    }
    reader_.Publish();
    RingPeer(/*always=*/false);
    budget -= std::min(budget, n);
    if (Draining()) continue;
    if (!in_payload_ && header_have_ == kWireHeaderBytes && !TakeHeader()) return false;
    if (in_payload_ && payload_have_ == slot_.size() && !TakePayload()) return false;
  }
  return true;
}

bool ShmConnection::TakeHeader() {
  header_have_ = 0;
  // Decoded from this side's copy: the peer may rewrite the ring's bytes at any time.
  StatusOr<WireHeader> decoded = DecodeWireHeader(header_bytes_);
  if (!decoded.ok()) {
    Close(absl::InvalidArgumentError(
        absl::StrCat("malformed header from ", peer_, ": ", decoded.status().message())));
    return false;
  }
  header_ = *decoded;
  // The handler's one validation point, for every message (connection.h).
  StatusOr<std::span<std::byte>> slot = handler_->ResolveSlot(*this, header_);
  if (!slot.ok()) {
    Close(slot.status());
    return false;
  }
  if (Draining()) return !closed_;  // the handler finished us: the payload is dropped
  if (slot->size() != header_.payload_bytes) {
    Close(absl::InternalError(absl::StrCat("slot of ", slot->size(), " bytes for a payload of ",
                                           header_.payload_bytes, " bytes")));
    return false;
  }
  if (header_.payload_bytes > 0) {
    slot_ = *slot;
    payload_have_ = 0;
    in_payload_ = true;
    return !closed_;
  }
  if (Status s = handler_->OnReceived(*this, header_); !s.ok()) Close(s);
  return !closed_;
}

bool ShmConnection::TakePayload() {
  in_payload_ = false;
  slot_ = {};
  if (Status s = handler_->OnReceived(*this, header_); !s.ok()) Close(s);
  return !closed_;
}

bool ShmConnection::SendSome(std::size_t& budget) {
  while (!queue_.empty() && budget > 0) {
    StatusOr<std::size_t> free = writer_.Free();
    if (!free.ok()) {
      CloseCorrupt(free.status());
      return false;
    }
    if (*free == 0) return true;  // the peer's bell brings us back once it took some
    PendingSend& front = queue_.front();
    std::size_t room = std::min(*free, budget);
    std::size_t n = 0;
    if (front.copied < kWireHeaderBytes) {
      n = writer_.Write(std::span(front.header).subspan(front.copied), room);
    } else {
      n = writer_.Write(front.payload.subspan(front.copied - kWireHeaderBytes), room);
    }
    front.copied += n;
    budget -= n;
    writer_.Publish();
    RingPeer(/*always=*/false);
    if (front.copied < kWireHeaderBytes + front.payload.size()) continue;
    // The message is in the ring: the caller's payload is free again.
    SendDone done = std::move(front.done);
    queue_.pop_front();
    if (done) done(absl::OkStatus());
    if (closed_) return false;  // a completion callback may close us
  }
  if (queue_.empty() && finishing_ && !finishing_->writing_ended) EndWriting();
  return !closed_;
}

void ShmConnection::Send(const WireHeader& header, std::span<const std::byte> payload,
                         SendDone done) {
  if (closed_ || finishing_) {
    if (done) {
      done(absl::UnavailableError(absl::StrCat("connection to ", peer_, " is ",
                                               closed_ ? "closed" : "finishing (Finish was called)")));
    }
    return;
  }
  queue_.push_back(PendingSend{EncodeWireHeader(header), payload, std::move(done)});
  // Copied on a later turn, never inside Send: a caller's completion must not run before Send
  // returns (a SendScheduler counts its window around the call; a Close right after fails it).
  SchedulePump();
}

void ShmConnection::OnPeerGone(const std::string& how) {
  peer_gone_ = true;
  // Whatever the peer published before it went is taken first (its BYE, its last pushes),
  // as one turn: a handler's Send only queues meanwhile.
  pumping_ = true;
  std::size_t everything = std::numeric_limits<std::size_t>::max();
  const bool open = ReceiveSome(everything);
  pumping_ = false;
  if (!open) return;
  if (Draining()) {
    // It ended without its end flag: did it take all of ours?
    return EndFinish(writer_.Drained()
                         ? absl::OkStatus()
                         : absl::UnavailableError(absl::StrCat(
                               peer_, " ended the connection (", how,
                               ") without reading to this side's end: what it had not read is lost")));
  }
  Close(absl::UnavailableError(absl::StrCat("peer ", peer_, " closed the connection (", how,
                                            in_payload_ ? ", in the middle of a payload)" : ")")));
}

void ShmConnection::CloseCorrupt(const Status& ring) {
  Close(Status(ring.code(), absl::StrCat("shm connection to ", peer_, ": ", ring.message())));
}

void ShmConnection::Close(const Status& why) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  bell_.close(ignored);
  socket_.close(ignored);  // the peer's liveness watch sees the end
  FailQueued(queue_, why);
  if (started_) handler_->OnClosed(*this, why);
  if (finishing_) finishing_->Closed(why);
}

void ShmConnection::Finish(std::chrono::milliseconds limit, FinishDone done) {
  if (closed_ || !started_) {
    Close(absl::OkStatus());
    if (done) done(absl::OkStatus());
    return;
  }
  if (finishing_) return finishing_->Chain(std::move(done));  // hears when the first one ends
  finishing_ = std::make_unique<Finishing>(std::move(done), bell_.get_executor());
  finishing_->Arm(limit, peer_, [self = shared_from_this()](const Status& late) {
    if (!self->closed_) self->EndFinish(late);
  });
  if (queue_.empty()) EndWriting();  // else SendSome does once the queue is in the ring
}

void ShmConnection::EndWriting() {
  finishing_->writing_ended = true;
  // A payload half received is dropped with the rest: the caller may free its slots once done.
  in_payload_ = false;
  slot_ = {};
  writer_.End();
  RingPeer(/*always=*/true);
  SchedulePump();
}

void ShmConnection::EndFinish(const Status& how) {
  finishing_->set_how(how);
  Close(absl::OkStatus());
}

}  // namespace phub::transport::shm
