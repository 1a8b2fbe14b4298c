#include "phub/transport/tcp/tcp_connection.h"

#include <sys/socket.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <vector>

#include "absl/strings/str_cat.h"

namespace phub::transport::tcp {

namespace asio = boost::asio;

namespace {
// At most this many messages go into one writev: enough to amortise the syscall over many
// small chunks, well under IOV_MAX (1024) with two buffers each.
constexpr std::size_t kMaxBatch = 64;

// What a Finish reads the peer's last bytes into, a read at a time (they are dropped).
constexpr std::size_t kDrainBytes = 64 * 1024;

// Completion condition "all of it, in as few syscalls as the kernel allows". Asio's default
// transfer_all() caps each underlying recv/sendmsg at 64 KiB, which for 512 KiB chunks costs
// 8x the syscalls and epoll wake-ups and measured ~30 % more CPU per byte than raw TCP
// (bench/exchange, strace). The cap exists to bound latency for other handlers; a shard's
// connections are served round-robin anyway and each message is one chunk.
struct TransferAllAtOnce {
  std::size_t operator()(const boost::system::error_code& ec, std::size_t) const {
    return ec ? 0 : std::size_t{1} << 30;
  }
};
}  // namespace

std::shared_ptr<TcpConnection> TcpConnection::Create(asio::ip::tcp::socket socket,
                                                     ConnectionHandler* handler) {
  return std::shared_ptr<TcpConnection>(new TcpConnection(std::move(socket), handler));
}

TcpConnection::TcpConnection(asio::ip::tcp::socket socket, ConnectionHandler* handler)
    : socket_(std::move(socket)), handler_(handler) {
  boost::system::error_code ec;
  auto endpoint = socket_.remote_endpoint(ec);
  peer_ = ec ? "unknown peer" : absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
}

void TcpConnection::Start() {
  started_ = true;
  ReadHeader();
}

bool TcpConnection::Draining() const { return finishing_ && finishing_->writing_ended; }

void TcpConnection::ReadHeader() {
  if (closed_) return;
  if (Draining()) return Drain();  // a handler callback just finished us
  reading_ = true;
  asio::async_read(socket_, asio::buffer(header_bytes_),
                   [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                     self->OnHeader(ec);
                   });
}

void TcpConnection::OnHeader(const boost::system::error_code& ec) {
  reading_ = false;
  if (closed_) return;
  // A Finish cancelled this read, or came too late to: either way, what follows is dropped.
  if (Draining()) return Drain();
  if (ec) return FailIo("reading a header", ec);
  bytes_received_ += kWireHeaderBytes;
  StatusOr<WireHeader> decoded = DecodeWireHeader(header_bytes_);
  if (!decoded.ok()) {
    return Close(absl::InvalidArgumentError(
        absl::StrCat("malformed header from ", peer_, ": ", decoded.status().message())));
  }
  header_ = *decoded;
  // Every message, payload or not, passes the handler's one validation point before anything
  // is read into memory or acted on (a zero-length message skipped it once: a zero-length PUSH
  // naming a chunk of another core crashed phubd).
  StatusOr<std::span<std::byte>> slot = handler_->ResolveSlot(*this, header_);
  if (!slot.ok()) return Close(slot.status());
  if (slot->size() != header_.payload_bytes) {
    return Close(absl::InternalError(absl::StrCat("slot of ", slot->size(), " bytes for a payload of ",
                                                  header_.payload_bytes, " bytes")));
  }
  if (header_.payload_bytes == 0) {
    if (Status s = handler_->OnReceived(*this, header_); !s.ok()) return Close(s);
    return ReadHeader();
  }
  if (Draining()) return Drain();  // the handler finished us
  reading_ = true;
  asio::async_read(socket_, asio::buffer(slot->data(), slot->size()), TransferAllAtOnce{},
                   [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                     self->OnPayload(ec);
                   });
}

void TcpConnection::OnPayload(const boost::system::error_code& ec) {
  reading_ = false;
  if (closed_) return;
  if (Draining()) return Drain();  // as in OnHeader
  if (ec) return FailIo("reading a payload", ec);
  bytes_received_ += header_.payload_bytes;
  if (Status s = handler_->OnReceived(*this, header_); !s.ok()) return Close(s);
  ReadHeader();
}

void TcpConnection::Send(const WireHeader& header, std::span<const std::byte> payload,
                         SendDone done) {
  if (closed_ || finishing_) {
    if (done) {
      done(absl::UnavailableError(absl::StrCat("connection to ", peer_, " is ",
                                               closed_ ? "closed" : "finishing (Finish was called)")));
    }
    return;
  }
  queue_.push_back(PendingSend{EncodeWireHeader(header), payload, std::move(done)});
  if (!writing_) WriteQueued();
}

void TcpConnection::WriteQueued() {
  std::size_t batch = std::min(queue_.size(), kMaxBatch);
  std::vector<asio::const_buffer> buffers;
  buffers.reserve(batch * 2);
  for (std::size_t i = 0; i < batch; ++i) {
    buffers.emplace_back(queue_[i].header.data(), queue_[i].header.size());
    if (!queue_[i].payload.empty()) {
      buffers.emplace_back(queue_[i].payload.data(), queue_[i].payload.size());
    }
  }
  writing_ = true;
  asio::async_write(socket_, buffers, TransferAllAtOnce{},
                    [self = shared_from_this(), batch](const boost::system::error_code& ec,
                                                       std::size_t bytes) {
                      self->bytes_sent_ += bytes;
                      self->OnWritten(ec, batch);
                    });
}

void TcpConnection::OnWritten(const boost::system::error_code& ec, std::size_t batch) {
  if (closed_) return;  // Close() already failed the queue.
  // The peer has gone, but what it sent before it went may still wait in this socket (a worker
  // that closes with weights in flight: its BYE). The reader takes that first and closes the
  // connection on the end of file or reset behind it, at once: the socket is dead, no read
  // waits. Closing here instead made phubd take a worker that had said BYE for a lost one.
  // `writing_` stays set, so later sends only queue, and Close() fails them.
  if (started_ && (ec == asio::error::connection_reset || ec == asio::error::broken_pipe)) return;
  if (ec) return FailIo("writing", ec);
  // `writing_` stays true while the callbacks run: a callback that Send()s only queues, and the
  // next write starts below, once. (Clearing it first started a second, overlapping write of
  // the same messages.)
  for (std::size_t i = 0; i < batch; ++i) {
    SendDone done = std::move(queue_.front().done);
    queue_.pop_front();
    if (done) done(absl::OkStatus());
    if (closed_) return;  // a completion callback may close us
  }
  writing_ = false;
  if (!queue_.empty()) return WriteQueued();
  if (finishing_) EndWriting();
}

void TcpConnection::FailIo(const char* what, const boost::system::error_code& ec) {
  if (ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::broken_pipe) {
    Close(absl::UnavailableError(absl::StrCat("peer ", peer_, " closed the connection (", ec.message(),
                                              " while ", what, ")")));
  } else {
    Close(absl::UnavailableError(
        absl::StrCat("I/O error with ", peer_, " while ", what, ": ", ec.message())));
  }
}

void TcpConnection::Close(const Status& why) {
  if (closed_) return;
  closed_ = true;
  boost::system::error_code ignored;
  socket_.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  FailQueued(queue_, why);
  if (started_) handler_->OnClosed(*this, why);  // callbacks only ever follow Start()
  if (finishing_) finishing_->Closed(why);
}

void TcpConnection::Finish(std::chrono::milliseconds limit, FinishDone done) {
  if (closed_ || !started_) {
    Close(absl::OkStatus());
    if (done) done(absl::OkStatus());
    return;
  }
  if (finishing_) return finishing_->Chain(std::move(done));  // hears when the first one ends
  finishing_ = std::make_unique<Finishing>(std::move(done), socket_.get_executor());
  finishing_->Arm(limit, peer_, [self = shared_from_this()](const Status& late) {
    if (!self->closed_) self->EndFinish(late);
  });
  if (!writing_) EndWriting();  // else OnWritten calls it once the queue is out
}

void TcpConnection::EndWriting() {
  finishing_->writing_ended = true;
  boost::system::error_code ignored;
  // The end of the stream goes behind every byte the kernel holds for the peer.
  socket_.shutdown(asio::ip::tcp::socket::shutdown_send, ignored);
  drain_ = std::make_unique<std::byte[]>(kDrainBytes);
  // A read in progress may be into one of the handler's slots: cancelled, it ends soon, and its
  // handler starts the drain. Never two reads at once: with a second one queued, the read that
  // took the peer's end left the other waiting for good (Asio's edge-triggered epoll gives the
  // end once; seen under TSan: a Finish that never ended). A composed read whose step had
  // already completed may still read on into the slot until its message is whole: the caller
  // keeps its buffers until `done`, which comes only after.
  if (reading_) {
    socket_.cancel(ignored);
    return;
  }
  Drain();
}

void TcpConnection::Drain() {
  reading_ = true;
  socket_.async_read_some(
      asio::buffer(drain_.get(), kDrainBytes),
      [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
        self->reading_ = false;
        if (self->closed_) return;
        // The peer's end. One that ends on reading ours (phubd, a ring neighbour) has read
        // every byte of ours. A reset: it closed with some of them unread.
        if (ec == asio::error::eof) return self->EndFinish(absl::OkStatus());
        if (ec) {
          return self->EndFinish(absl::UnavailableError(absl::StrCat(
              self->peer_, " ended the connection (", ec.message(),
              ") without reading to this side's end: what it had not read is lost")));
        }
        self->Drain();
      });
}

void TcpConnection::EndFinish(const Status& how) {
  finishing_->set_how(how);
  Close(absl::OkStatus());
}

int TcpConnection::receive_cpu() const {
  int cpu = -1;
  socklen_t length = sizeof(cpu);
  // Linux 3.19+; -1 on a socket that has received nothing yet.
  auto& socket = const_cast<asio::ip::tcp::socket&>(socket_);
  if (!socket.is_open() ||
      ::getsockopt(socket.native_handle(), SOL_SOCKET, SO_INCOMING_CPU, &cpu, &length) != 0) {
    return -1;
  }
  return cpu;
}

}  // namespace phub::transport::tcp
