// Forged peers for tests: raw TCP connections on 127.0.0.1 that say exactly the bytes a test
// chooses (forged Hellos, control frames that lie about their length, data-plane headers no
// PsClient would send), to a real phubd (tests/integration/) or to a Shard on an in-process
// event loop (tests/phub/server/); RawListener plays phubd's side (forged_phubd.h).
//
// Every read takes a deadline (poll(2) on a non-blocking socket), so a test that waits for
// phubd's answer can fail but never hang, whatever phubd does. Writes are bounded the same way.
// Not thread-safe: one socket belongs to one test thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "phub/keys/key_table.h"
#include "phub/transport/wire_header.h"
#include "proto/phub.pb.h"

namespace phub::testing {

using Millis = std::chrono::milliseconds;

class RawSocket {
 public:
  enum class Read {
    kOk,       // the bytes (or message) asked for arrived
    kClosed,   // the peer closed (EOF or reset) first
    kTimeout,  // the deadline passed first
    kGarbage,  // a control frame that is not a ControlMessage (or longer than 64 MiB)
  };

  // Connects to 127.0.0.1:port, from `source` (another loopback address such as 127.0.0.2, to
  // play a second host; empty: the kernel's choice); connected() is false if that failed within
  // `timeout`. Such a socket plays a worker: phubd's Challenge (its first message) is taken by
  // the first ReadMessage or SendMessage of a Hello, and a Hello's token_proof, which test
  // Hellos carry the worker's TOKEN in (MakeHello), is replaced by the proof of it.
  static RawSocket Connect(std::uint16_t port, Millis timeout = Millis(5000),
                           const std::string& source = "");

  RawSocket() = default;
  RawSocket(RawSocket&& other) noexcept;
  RawSocket& operator=(RawSocket&& other) noexcept;
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  ~RawSocket();

  bool connected() const { return fd_ >= 0; }

  // All of `bytes`, or false if the peer is gone (or 5 s passed with the send buffer full).
  bool Send(std::span<const std::byte> bytes);
  bool Send(std::string_view bytes);
  // A control-plane frame: 4-byte little-endian length, then the serialized message. A worker's
  // Hello first takes the Challenge (within 5 s) and answers it (Connect above).
  bool SendMessage(const proto::ControlMessage& message);
  // The nonce of the Challenge taken, empty before.
  const std::string& nonce() const { return nonce_; }
  // A data-plane header and its payload.
  bool SendWire(const transport::EncodedHeader& header, std::span<const std::byte> payload = {});

  // The frame as given, no Challenge taken first.
  bool SendFramed(const proto::ControlMessage& message);
  // Exactly out.size() bytes.
  Read ReadExact(std::span<std::byte> out, Millis timeout);
  // One control-plane frame, parsed (a worker's socket: the Challenge is taken, not returned).
  Read ReadMessage(proto::ControlMessage& out, Millis timeout);
  // One frame exactly as it came, the Challenge included.
  Read ReadFrame(proto::ControlMessage& out, Millis timeout);
  // One data-plane message: header (decoded; a header that does not decode counts as garbage)
  // and its payload.
  Read ReadWire(transport::WireHeader& header, std::vector<std::byte>& payload, Millis timeout);
  // Discards whatever arrives until the peer closes: true if it closed within `timeout`.
  bool WaitClosed(Millis timeout);

  // Bytes arrived and not read yet; bytes sent and not yet acknowledged by the peer's kernel.
  std::size_t Unread() const;
  std::size_t Unacknowledged() const;

  void ShutdownWrite();  // half-close: the peer reads EOF, we can still read
  void Close();

 private:
  friend class RawListener;
  explicit RawSocket(int fd, bool worker = false) : fd_(fd), worker_(worker) {}
  int fd_ = -1;
  bool worker_ = false;        // connected to phubd: its first message is a Challenge
  std::string nonce_;          // the Challenge's, once taken
  std::optional<proto::ControlMessage> held_;  // read while looking for the Challenge
};

// The other side, for a test that plays phubd: a listener on 127.0.0.1 (the kernel picks the
// port) whose accepted connections are RawSockets.
class RawListener {
 public:
  // listening() is false if the socket could not be bound.
  static RawListener Listen();

  RawListener() = default;
  RawListener(RawListener&& other) noexcept;
  RawListener& operator=(RawListener&& other) noexcept;
  RawListener(const RawListener&) = delete;
  RawListener& operator=(const RawListener&) = delete;
  ~RawListener() { Close(); }

  bool listening() const { return fd_ >= 0; }
  std::uint16_t port() const { return port_; }
  // The next connection, or one that is not connected() if none came within `timeout`.
  RawSocket Accept(Millis timeout);
  void Close();

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

const char* ReadName(RawSocket::Read read);
inline std::ostream& operator<<(std::ostream& out, RawSocket::Read read) {
  return out << ReadName(read);
}

// The Hello a PsClient would send for `tensors`; `token` rides in token_proof until a worker's
// RawSocket sends it (and answers the Challenge with the proof of it).
proto::Hello MakeHello(std::uint32_t rank, std::uint32_t world,
                       const std::vector<keys::TensorSpec>& tensors, const std::string& token = "");
proto::ControlMessage Wrap(const proto::Hello& hello);
proto::ControlMessage WrapGoodbye(std::uint64_t iterations);

// A worker of a real job played by hand: its control connection and, once it has the Welcome,
// one data connection per server core.
struct ForgedMember {
  std::uint32_t rank = 0;
  RawSocket control;
  proto::Welcome welcome;
  std::optional<keys::KeyTable> table;  // the job's chunking, rebuilt from the Welcome
  std::vector<RawSocket> data;          // by core, once attached

  // Connects and sends the Hello; false if phubd could not be reached.
  bool SendHello(std::uint16_t port, const proto::Hello& hello);
  // Waits for the Welcome (it comes when the whole job has joined); empty string, or what came
  // instead (an Error's text, a timeout) for the test's failure message.
  std::string AwaitWelcome(const std::vector<keys::TensorSpec>& tensors, Millis timeout);
  // Opens a data connection to every core and sends the ATTACH a PsClient would; false if a
  // core could not be reached.
  bool AttachAll();
  // The core that owns chunk k (REQUIRES: AwaitWelcome succeeded).
  std::uint32_t OwnerOf(std::uint32_t chunk) const { return table->owner(chunk); }
  // The data port of core i as the Welcome announced it.
  std::uint16_t DataPort(std::uint32_t core) const;
};

// The 32-byte header a PsClient would send, and the raw ATTACH of `rank` to `core` for
// `session`.
transport::EncodedHeader Header(transport::Op op, std::uint32_t worker, std::uint32_t chunk,
                                std::uint64_t iteration, std::uint32_t payload_bytes);
transport::EncodedHeader AttachHeader(std::uint32_t rank, std::uint32_t core,
                                      std::uint64_t session);

}  // namespace phub::testing
