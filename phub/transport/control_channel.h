// Control-plane framing on a TCP stream: a 4-byte little-endian length, then a serialized
// proto::ControlMessage. Used by phubd's control plane, PsClient's handshake and the verbs set-up
// channel; the data plane never goes through here.
//
// Reads never allocate what the peer merely claims: bytes go through a ControlFrameDecoder
// (control_frame.h) in pieces of at most kControlReadChunkBytes, so a peer that sends 4 bytes
// claiming 256 MiB holds a 64 KiB read buffer, not 256 MiB, and one over the decoder's limits
// is refused with the limit and the flag that raises it.
//
// Two ways to read:
//  - with limits only: each call reads exactly one frame and never past it (what follows stays
//    in the socket), so the caller needs no state across calls;
//  - with a decoder the caller keeps for the connection's life: reads take what the socket has
//    (fewer syscalls), and bytes past the message (a peer may send two in one segment) stay in
//    the decoder for the next call. Use the same decoder for every read of that connection.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/write.hpp>  // callers write framed messages with it
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "phub/common/status.h"
#include "phub/transport/control_frame.h"
#include "proto/phub.pb.h"

namespace phub::transport {

// The largest single read from the socket, and so the read buffer of one pending read.
inline constexpr std::size_t kControlReadChunkBytes = 64 * 1024;

// The framed bytes of `message` (length prefix included).
std::shared_ptr<std::string> FrameControlMessage(const proto::ControlMessage& message);

// Blocking write, for the client's handshake.
Status WriteControlMessage(boost::asio::ip::tcp::socket& socket,
                           const proto::ControlMessage& message);

// Blocking reads of one message. Unavailable when the peer closed or the socket failed,
// InvalidArgument (from the decoder) for a frame over the limits or garbage.
StatusOr<proto::ControlMessage> ReadControlMessage(boost::asio::ip::tcp::socket& socket,
                                                   const ControlFrameLimits& limits = {});
// Blocking read of one message that gives up after `timeout`: DeadlineExceeded when the whole
// message has not arrived by then (a peer that is stopped or hung: the kernel still accepts
// and buffers, so a plain read would wait for good). Reads never past the message.
StatusOr<proto::ControlMessage> ReadControlMessage(boost::asio::ip::tcp::socket& socket,
                                                   std::chrono::milliseconds timeout,
                                                   const ControlFrameLimits& limits = {});
// With the connection's decoder: returns a message it already holds without reading; after an
// error the decoder is unusable and every later call returns that error.
StatusOr<proto::ControlMessage> ReadControlMessage(boost::asio::ip::tcp::socket& socket,
                                                   ControlFrameDecoder& decoder);

// Asynchronous reads of one message; `done` runs on the socket's io_context thread (never
// inside this call) with the message, or Unavailable (peer closed, socket closed to cancel) /
// InvalidArgument (over a limit, garbage). The socket must outlive the read (close it to
// cancel); one read at a time per socket.
using ControlMessageCallback = std::function<void(StatusOr<proto::ControlMessage>)>;
void AsyncReadControlMessage(boost::asio::ip::tcp::socket& socket, ControlMessageCallback done);
void AsyncReadControlMessage(boost::asio::ip::tcp::socket& socket, const ControlFrameLimits& limits,
                             ControlMessageCallback done);
// With the connection's decoder (kept alive by the read while it runs).
void AsyncReadControlMessage(boost::asio::ip::tcp::socket& socket,
                             std::shared_ptr<ControlFrameDecoder> decoder,
                             ControlMessageCallback done);

}  // namespace phub::transport
