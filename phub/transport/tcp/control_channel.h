// Control-plane framing on a TCP stream: a 4-byte little-endian length, then a serialized
// proto::ControlMessage. Used by phubd's control plane and PsClient's handshake; the data
// plane never goes through here.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>
#include <functional>
#include <memory>
#include <string>

#include "phub/common/status.h"
#include "proto/phub.pb.h"

namespace phub::transport::tcp {

// A Hello for a model of a million tensors stays below this; a larger length is corruption.
inline constexpr std::uint32_t kMaxControlMessageBytes = 256u << 20;

// The framed bytes of `message` (length prefix included).
std::shared_ptr<std::string> FrameControlMessage(const proto::ControlMessage& message);

// Blocking versions, for the client's handshake.
Status WriteControlMessage(boost::asio::ip::tcp::socket& socket,
                           const proto::ControlMessage& message);
StatusOr<proto::ControlMessage> ReadControlMessage(boost::asio::ip::tcp::socket& socket);

// Reads one message asynchronously; `done` runs on the socket's io_context thread with the
// message, or Unavailable (peer closed) / InvalidArgument (garbage). The socket must outlive
// the read (close it to cancel).
using ControlMessageCallback = std::function<void(StatusOr<proto::ControlMessage>)>;
void AsyncReadControlMessage(boost::asio::ip::tcp::socket& socket, ControlMessageCallback done);

}  // namespace phub::transport::tcp
