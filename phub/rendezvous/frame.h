// The TCP rendezvous's wire format (tcp_store.h): frames of a 4-byte little-endian body length,
// then the body: one type byte and that type's fields, little-endian, strings as a 2-byte
// length and the bytes. The whole layout, the limits and what each side sends are in
// docs/protocol.md ("Rendezvous"). Pure: no sockets, so tests and the fuzzer
// (tests/fuzz/rendezvous_frame_fuzzer.cc) drive the decoder directly.
//
// What a hostile peer can cost: a body length over kMaxFrameBytes is refused on its 4 bytes,
// and a frame is buffered only as its bytes arrive, so at most kMaxFrameBytes + 4 bytes are
// held per connection. Every field is checked against its limit, every string's length against
// what is left of the body, and a body with bytes after its last field is refused: a frame
// decodes to exactly one Message, and EncodeFrame gives back the same bytes.
//
// Thread-safety: none; a decoder belongs to one connection and its thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>

#include "absl/strings/string_view.h"
#include "phub/common/status.h"

namespace phub::rendezvous {

// Protocol constants: both sides must agree on them, so they are not flags.
inline constexpr std::uint32_t kHelloMagic = 0x56524850;  // "PHRV" in little-endian bytes
inline constexpr std::uint16_t kProtocolVersion = 1;
inline constexpr std::size_t kMaxKeyBytes = 128;     // [A-Za-z0-9._-], not starting with '.'
inline constexpr std::size_t kMaxValueBytes = 4096;  // a "host port" line, a 128-byte NCCL id
inline constexpr std::size_t kMaxJobBytes = 128;     // the job id of tcp://HOST:PORT/JOB
inline constexpr std::size_t kMaxTextBytes = 1024;   // an Error's explanation
inline constexpr std::size_t kFramePrefixBytes = 4;
// The largest body any message can have (a Publish of the longest key and value); a length
// prefix above it is refused before a byte of the body is read.
inline constexpr std::size_t kMaxFrameBytes = 1 + 2 + kMaxKeyBytes + 2 + kMaxValueBytes;

enum class MessageType : std::uint8_t {
  kHello = 1,     // client -> server, first: magic, version, rank, world size, job id
  kWelcome = 2,   // server -> client: admitted
  kPublish = 3,   // key, value -> kOk
  kLookup = 4,    // key, wait_ms -> kValue, or kNotFound once wait_ms passed without the key
  kValue = 5,     // value
  kNotFound = 6,  //
  kRemove = 7,    // key -> kOk (whether or not the key was there)
  kDone = 8,      // this rank needs the server no more -> kOk
  kOk = 9,        //
  kError = 10,    // retryable flag, text; the server closes the connection after it
};

// One decoded message; only the fields of its type are meaningful (the others keep their
// defaults, so that two decodings of the same bytes compare equal).
struct Message {
  MessageType type = MessageType::kOk;
  std::uint16_t version = kProtocolVersion;  // kHello
  std::uint32_t rank = 0;                    // kHello
  std::uint32_t world_size = 0;              // kHello
  std::string job{};                         // kHello
  std::string key{};                         // kPublish, kLookup, kRemove
  std::string value{};                       // kPublish, kValue
  std::uint32_t wait_ms = 0;                 // kLookup
  bool retryable = false;                    // kError: the client may connect again and retry
  std::string text{};                        // kError

  bool operator==(const Message&) const = default;
};

absl::string_view MessageTypeName(MessageType type);

// Whether `key` is a valid key: 1..kMaxKeyBytes of [A-Za-z0-9._-], not starting with '.' (the
// file store makes it a file name: no '/', no "..", no hidden files). InvalidArgument says why.
Status CheckKey(absl::string_view key);
// The same rule for a job id (1..kMaxJobBytes); an empty job id is valid (no id).
Status CheckJob(absl::string_view job);

// The whole frame (prefix and body). InvalidArgument when a field is over its limit or a key or
// job id is not valid: the encoder never writes what the decoder would refuse.
StatusOr<std::string> EncodeFrame(const Message& message);

// Decodes one body (the bytes after the prefix). InvalidArgument names what is wrong.
StatusOr<Message> DecodeBody(std::span<const std::byte> body);

// `text` from a peer, made safe for an error message or a log line: at most `max_bytes`, bytes
// outside printable ASCII as \xNN.
std::string Printable(absl::string_view text, std::size_t max_bytes = 128);

class FrameDecoder {
 public:
  // Appends bytes as they arrive (any split) and decodes every frame they complete. Memory
  // grows only with the bytes of the frame in progress. InvalidArgument names what was wrong;
  // the decoder is unusable after it (every later Feed returns the same error); messages
  // decoded before the error can still be popped.
  Status Feed(std::span<const std::byte> bytes);
  // The next complete message, in the order they were sent; nullopt when none is ready.
  std::optional<Message> Pop();
  bool has_message() const { return !ready_.empty(); }
  // Whether part of a frame has arrived and the rest has not: the server's per-frame deadline
  // runs while this is true.
  bool mid_frame() const { return !partial_.empty(); }
  std::size_t buffered_bytes() const { return partial_.size(); }
  const Status& status() const { return status_; }

 private:
  std::string partial_;  // the frame in progress: prefix and the body bytes received so far
  std::deque<Message> ready_;
  Status status_;
};

}  // namespace phub::rendezvous
