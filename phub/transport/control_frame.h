// Decoding of the control plane's framing (a 4-byte little-endian length, then a serialized
// proto::ControlMessage) from bytes as they arrive, with every peer-claimed size checked
// against a limit before memory is spent on it. Pure: no sockets (control_channel.h does the
// reading and feeds a decoder), so tests and the fuzzer (tests/fuzz/) drive it directly.
//
// What a hostile peer can cost: a frame's claimed length is refused on its 4 bytes if it is over
// max_frame_bytes, and an accepted one is buffered only as its bytes arrive (never reserved up
// front), so "4 bytes claiming 256 MiB" holds 4 bytes. A frame's body is parsed only when it is
// complete; a Hello's TensorSpec entries are counted on the wire first, and a Hello with more
// than max_tensors is refused before protobuf builds it (an entry of 2 bytes on the wire is
// ~50 bytes parsed).
//
// Thread-safety: none; a decoder belongs to one connection and its thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <string>

#include "phub/common/status.h"
#include "proto/phub.pb.h"

namespace phub::transport {

// The bounds a decoder enforces, and the command-line flags that set them (named in errors so
// the reader knows what to raise). The daemon fills this from its options; clients use the
// defaults.
struct ControlFrameLimits {
  std::uint32_t max_frame_bytes = 4u << 20;  // a frame longer than this is refused
  std::uint32_t max_tensors = 100000;        // a Hello with more TensorSpec entries is refused
  std::string frame_flag = "--max-control-frame-bytes";
  std::string tensors_flag = "--max-tensors";
};

class ControlFrameDecoder {
 public:
  explicit ControlFrameDecoder(ControlFrameLimits limits = {});

  // Appends bytes as they arrive from the peer (any split: a byte at a time, or several
  // messages at once) and decodes every frame they complete. Memory grows only with the bytes
  // of the frame in progress; complete frames are decoded straight from `bytes` when they lie
  // wholly in it. InvalidArgument names what was wrong (a frame over the limit, a message that
  // does not parse as phub.proto.ControlMessage, a Hello with too many tensors), the limit and
  // its flag; the decoder is unusable after it: every later Feed returns the same error, and
  // the messages decoded before the error can still be popped.
  Status Feed(std::span<const std::byte> bytes);

  // The next complete message, in the order they were sent; nullopt when none is ready.
  std::optional<proto::ControlMessage> Pop();

  // Bytes of the unfinished frame held (its length prefix included); decoded messages waiting
  // in Pop are not counted.
  std::size_t buffered_bytes() const { return partial_.size(); }
  // Bytes still to come before the frame in progress is complete (at least 1): what a reader
  // that must not read past this frame asks the socket for.
  std::size_t bytes_to_next_message() const;
  // Whether Pop has a message.
  bool has_message() const { return !ready_.empty(); }
  // OK, or the error that made the decoder unusable.
  const Status& status() const { return status_; }
  const ControlFrameLimits& limits() const { return limits_; }

 private:
  static constexpr std::size_t kPrefixBytes = 4;

  std::uint32_t PrefixLength() const;  // REQUIRES: partial_ holds the prefix
  Status CheckLength(std::uint32_t length);
  Status Decode(std::span<const std::byte> body);
  void ReleasePartial();

  ControlFrameLimits limits_;
  std::string partial_;  // the frame in progress: its prefix and the body bytes received so far
  std::deque<proto::ControlMessage> ready_;
  Status status_;
};

// How many TensorSpec entries the Hello in a serialized ControlMessage holds (summed over every
// occurrence of the hello field, which protobuf would merge), counted on the wire with
// protobuf's CodedInputStream, without building any message. InvalidArgument if the wire format
// is broken. Exposed for tests.
StatusOr<std::uint64_t> CountHelloTensors(std::span<const std::byte> serialized);

}  // namespace phub::transport
