#include "phub/transport/tcp/control_channel.h"

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::transport::tcp {

namespace asio = boost::asio;

namespace {

Status CheckLength(std::uint32_t length) {
  if (length > kMaxControlMessageBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "control message of ", length, " bytes exceeds the limit of ", kMaxControlMessageBytes,
        ": the peer is not speaking PHub's control protocol"));
  }
  return absl::OkStatus();
}

StatusOr<proto::ControlMessage> Parse(const std::string& body) {
  proto::ControlMessage message;
  if (!message.ParseFromString(body)) {
    return absl::InvalidArgumentError("control message does not parse as phub.proto.ControlMessage");
  }
  return message;
}

Status IoError(const char* what, const boost::system::error_code& ec) {
  return absl::UnavailableError(absl::StrCat("control connection: ", what, ": ", ec.message()));
}

// State of one asynchronous read; kept alive by the completion handlers that hold it.
struct PendingRead {
  std::uint32_t length = 0;
  std::string body;
  ControlMessageCallback done;
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
  if (ec) return IoError("write", ec);
  return absl::OkStatus();
}

StatusOr<proto::ControlMessage> ReadControlMessage(asio::ip::tcp::socket& socket) {
  std::uint32_t length = 0;
  boost::system::error_code ec;
  asio::read(socket, asio::buffer(&length, 4), ec);
  if (ec) return IoError("read", ec);
  PHUB_RETURN_IF_ERROR(CheckLength(length));
  std::string body(length, '\0');
  asio::read(socket, asio::buffer(body), ec);
  if (ec) return IoError("read", ec);
  return Parse(body);
}

void AsyncReadControlMessage(asio::ip::tcp::socket& socket, ControlMessageCallback done) {
  auto read = std::make_shared<PendingRead>();
  read->done = std::move(done);
  asio::async_read(
      socket, asio::buffer(&read->length, 4),
      [&socket, read](const boost::system::error_code& ec, std::size_t) {
        if (ec) return read->done(IoError("read", ec));
        if (Status s = CheckLength(read->length); !s.ok()) return read->done(s);
        read->body.assign(read->length, '\0');
        asio::async_read(socket, asio::buffer(read->body),
                         [read](const boost::system::error_code& ec, std::size_t) {
                           if (ec) return read->done(IoError("read", ec));
                           read->done(Parse(read->body));
                         });
      });
}

}  // namespace phub::transport::tcp
