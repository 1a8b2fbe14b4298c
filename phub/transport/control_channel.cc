#include "phub/transport/control_channel.h"

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/transport/poll_until.h"

namespace phub::transport {

namespace asio = boost::asio;

namespace {

// A read that may take more than the frame in progress asks for at least this much, so a
// stream of small messages is not read a few bytes per syscall.
constexpr std::size_t kSmallestGreedyRead = 4 * 1024;

// How much the next read asks for. `exact`: never past the frame in progress.
std::size_t ReadSize(const ControlFrameDecoder& decoder, bool exact) {
  const std::size_t wanted = decoder.bytes_to_next_message();
  if (exact) return std::min(wanted, kControlReadChunkBytes);
  return std::clamp(wanted, kSmallestGreedyRead, kControlReadChunkBytes);
}

Status IoError(const char* what, const boost::system::error_code& ec,
               const ControlFrameDecoder& decoder) {
  std::string partial;
  if (decoder.buffered_bytes() > 0) {
    partial = absl::StrCat(" (", decoder.buffered_bytes(), " bytes into a message, ",
                           decoder.bytes_to_next_message(), " still to come)");
  }
  return absl::UnavailableError(
      absl::StrCat("control connection: ", what, ": ", ec.message(), partial));
}

StatusOr<proto::ControlMessage> Read(asio::ip::tcp::socket& socket, ControlFrameDecoder& decoder,
                                     bool exact) {
  std::vector<std::byte> buffer;
  while (true) {
    PHUB_RETURN_IF_ERROR(decoder.status());
    if (std::optional<proto::ControlMessage> message = decoder.Pop()) return std::move(*message);
    buffer.resize(ReadSize(decoder, exact));
    boost::system::error_code ec;
    const std::size_t got = exact ? asio::read(socket, asio::buffer(buffer), ec)
                                  : socket.read_some(asio::buffer(buffer), ec);
    if (ec) return IoError("read", ec, decoder);
    PHUB_RETURN_IF_ERROR(decoder.Feed(std::span(buffer).first(got)));
  }
}

// One asynchronous read; kept alive by the completion handler that holds it. The read buffer
// exists only while a read is pending and is at most kControlReadChunkBytes.
class AsyncRead : public std::enable_shared_from_this<AsyncRead> {
 public:
  AsyncRead(asio::ip::tcp::socket& socket, std::shared_ptr<ControlFrameDecoder> decoder, bool exact,
            ControlMessageCallback done)
      : socket_(socket), decoder_(std::move(decoder)), exact_(exact), done_(std::move(done)) {}

  void Start() {
    if (decoder_->has_message() || !decoder_->status().ok()) {
      // Already decided: answer from the loop, not from inside the caller's call.
      asio::post(socket_.get_executor(), [self = shared_from_this()] { self->Continue(); });
      return;
    }
    ReadMore();
  }

 private:
  void Continue() {
    if (!decoder_->status().ok()) return done_(decoder_->status());
    if (std::optional<proto::ControlMessage> message = decoder_->Pop()) {
      return done_(std::move(*message));
    }
    ReadMore();
  }

  void ReadMore() {
    buffer_.resize(ReadSize(*decoder_, exact_));
    auto on_read = [self = shared_from_this()](const boost::system::error_code& ec,
                                               std::size_t got) { self->OnRead(ec, got); };
    if (exact_) {
      asio::async_read(socket_, asio::buffer(buffer_), std::move(on_read));
    } else {
      socket_.async_read_some(asio::buffer(buffer_), std::move(on_read));
    }
  }

  void OnRead(const boost::system::error_code& ec, std::size_t got) {
    if (ec) return done_(IoError("read", ec, *decoder_));
    if (Status s = decoder_->Feed(std::span(buffer_).first(got)); !s.ok()) return done_(s);
    Continue();
  }

  asio::ip::tcp::socket& socket_;
  std::shared_ptr<ControlFrameDecoder> decoder_;
  const bool exact_;
  ControlMessageCallback done_;
  std::vector<std::byte> buffer_;
};

}  // namespace

std::shared_ptr<std::string> FrameControlMessage(const proto::ControlMessage& message) {
  std::string body = message.SerializeAsString();
  auto framed = std::make_shared<std::string>(4 + body.size(), '\0');
  std::uint32_t length = static_cast<std::uint32_t>(body.size());
  std::memcpy(framed->data(), &length, 4);
  std::memcpy(framed->data() + 4, body.data(), body.size());
  return framed;
}

Status WriteControlMessage(asio::ip::tcp::socket& socket, const proto::ControlMessage& message) {
  auto framed = FrameControlMessage(message);
  boost::system::error_code ec;
  asio::write(socket, asio::buffer(*framed), ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("control connection: write: ", ec.message()));
  }
  return absl::OkStatus();
}

StatusOr<proto::ControlMessage> ReadControlMessage(asio::ip::tcp::socket& socket,
                                                   const ControlFrameLimits& limits) {
  ControlFrameDecoder decoder(limits);
  return Read(socket, decoder, /*exact=*/true);
}

StatusOr<proto::ControlMessage> ReadControlMessage(asio::ip::tcp::socket& socket,
                                                   std::chrono::milliseconds timeout,
                                                   const ControlFrameLimits& limits) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  ControlFrameDecoder decoder(limits);
  std::vector<std::byte> buffer;
  while (true) {
    PHUB_RETURN_IF_ERROR(decoder.status());
    if (std::optional<proto::ControlMessage> message = decoder.Pop()) return std::move(*message);
    PHUB_ASSIGN_OR_RETURN(const bool readable,
                          PollUntil(socket.native_handle(), POLLIN, deadline, "control connection"));
    if (!readable) {
      return absl::DeadlineExceededError(absl::StrCat(
          "control connection: no message within ", timeout.count(), " ms",
          decoder.buffered_bytes() > 0 ? " (one had begun to arrive)" : ""));
    }
    buffer.resize(ReadSize(decoder, /*exact=*/true));
    boost::system::error_code ec;
    // What is there, at most up to the message's end: never blocks once readable.
    const std::size_t got = socket.read_some(asio::buffer(buffer), ec);
    if (ec) return IoError("read", ec, decoder);
    PHUB_RETURN_IF_ERROR(decoder.Feed(std::span(buffer).first(got)));
  }
}

StatusOr<proto::ControlMessage> ReadControlMessage(asio::ip::tcp::socket& socket,
                                                   ControlFrameDecoder& decoder) {
  return Read(socket, decoder, /*exact=*/false);
}

void AsyncReadControlMessage(asio::ip::tcp::socket& socket, ControlMessageCallback done) {
  AsyncReadControlMessage(socket, ControlFrameLimits{}, std::move(done));
}

void AsyncReadControlMessage(asio::ip::tcp::socket& socket, const ControlFrameLimits& limits,
                             ControlMessageCallback done) {
  auto decoder = std::make_shared<ControlFrameDecoder>(limits);
  std::make_shared<AsyncRead>(socket, std::move(decoder), /*exact=*/true, std::move(done))->Start();
}

void AsyncReadControlMessage(asio::ip::tcp::socket& socket,
                             std::shared_ptr<ControlFrameDecoder> decoder,
                             ControlMessageCallback done) {
  std::make_shared<AsyncRead>(socket, std::move(decoder), /*exact=*/false, std::move(done))
      ->Start();
}

}  // namespace phub::transport
