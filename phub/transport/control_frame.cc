#include "phub/transport/control_frame.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace phub::transport {
namespace {

using google::protobuf::internal::WireFormatLite;
using google::protobuf::io::CodedInputStream;

// Field numbers in proto/phub.proto that the tensor count looks for.
constexpr int kControlMessageHelloField = 1;  // ControlMessage.hello
constexpr int kHelloTensorsField = 5;         // Hello.tensors

// A finished frame's buffer is kept for the next one unless it grew past this.
constexpr std::size_t kKeptCapacity = 64 * 1024;

Status Malformed(std::size_t bytes) {
  return absl::InvalidArgumentError(absl::StrCat(
      "control message of ", bytes,
      " bytes does not parse as phub.proto.ControlMessage: the peer is not speaking PHub's "
      "control protocol, or runs a different PHub release"));
}

bool IsLengthDelimited(std::uint32_t tag) {
  return WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
}

// Reads the length of a length-delimited field and limits `in` to it; false if the length is
// not a varint or runs past the end of the input.
bool EnterLengthDelimited(CodedInputStream& in, std::size_t size, CodedInputStream::Limit* limit) {
  std::uint32_t length = 0;
  if (!in.ReadVarint32(&length)) return false;
  if (length > size - static_cast<std::size_t>(in.CurrentPosition())) return false;
  *limit = in.PushLimit(static_cast<int>(length));
  return true;
}

}  // namespace

StatusOr<std::uint64_t> CountHelloTensors(std::span<const std::byte> serialized) {
  if (serialized.size() > static_cast<std::size_t>(INT_MAX)) return Malformed(serialized.size());
  CodedInputStream in(reinterpret_cast<const std::uint8_t*>(serialized.data()),
                      static_cast<int>(serialized.size()));
  std::uint64_t tensors = 0;
  while (std::uint32_t tag = in.ReadTag()) {
    if (WireFormatLite::GetTagFieldNumber(tag) != kControlMessageHelloField ||
        !IsLengthDelimited(tag)) {
      if (!WireFormatLite::SkipField(&in, tag)) return Malformed(serialized.size());
      continue;
    }
    CodedInputStream::Limit limit;
    if (!EnterLengthDelimited(in, serialized.size(), &limit)) return Malformed(serialized.size());
    while (std::uint32_t inner = in.ReadTag()) {
      if (WireFormatLite::GetTagFieldNumber(inner) == kHelloTensorsField &&
          IsLengthDelimited(inner)) {
        ++tensors;
      }
      if (!WireFormatLite::SkipField(&in, inner)) return Malformed(serialized.size());
    }
    if (!in.ConsumedEntireMessage() || in.BytesUntilLimit() != 0) {
      return Malformed(serialized.size());
    }
    in.PopLimit(limit);
  }
  if (!in.ConsumedEntireMessage()) return Malformed(serialized.size());
  return tensors;
}

ControlFrameDecoder::ControlFrameDecoder(ControlFrameLimits limits) : limits_(std::move(limits)) {}

std::uint32_t ControlFrameDecoder::PrefixLength() const {
  std::uint32_t length = 0;
  std::memcpy(&length, partial_.data(), kPrefixBytes);  // little-endian (wire_header.cc asserts)
  return length;
}

std::size_t ControlFrameDecoder::bytes_to_next_message() const {
  if (partial_.size() < kPrefixBytes) return kPrefixBytes - partial_.size();
  return kPrefixBytes + std::size_t{PrefixLength()} - partial_.size();
}

Status ControlFrameDecoder::CheckLength(std::uint32_t length) {
  // protobuf parses at most INT_MAX bytes; a limit set above that is capped there.
  const std::size_t limit = std::min<std::size_t>(limits_.max_frame_bytes, INT_MAX);
  if (length <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("control message of ", length, " bytes exceeds the limit of ", limit, " bytes (",
                   limits_.frame_flag,
                   "): a peer speaking PHub's control protocol stays below it; if a "
                   "worker's Hello really is this large, raise ",
                   limits_.frame_flag));
}

Status ControlFrameDecoder::Decode(std::span<const std::byte> body) {
  PHUB_ASSIGN_OR_RETURN(std::uint64_t tensors, CountHelloTensors(body));
  if (tensors > limits_.max_tensors) {
    return absl::InvalidArgumentError(
        absl::StrCat("Hello with ", tensors, " tensors exceeds the limit of ", limits_.max_tensors,
                     " (", limits_.tensors_flag,
                     "): if the model really has this many tensors, raise ", limits_.tensors_flag));
  }
  proto::ControlMessage message;
  if (!message.ParseFromArray(body.data(), static_cast<int>(body.size()))) {
    return Malformed(body.size());
  }
  ready_.push_back(std::move(message));
  return absl::OkStatus();
}

void ControlFrameDecoder::ReleasePartial() {
  if (partial_.capacity() > kKeptCapacity) {
    std::string().swap(partial_);
  } else {
    partial_.clear();
  }
}

Status ControlFrameDecoder::Feed(std::span<const std::byte> bytes) {
  if (!status_.ok()) return status_;
  auto append = [&](std::size_t n) {
    partial_.append(reinterpret_cast<const char*>(bytes.data()), n);
    bytes = bytes.subspan(n);
  };
  while (!bytes.empty()) {
    if (partial_.size() < kPrefixBytes) {
      append(std::min(kPrefixBytes - partial_.size(), bytes.size()));
      if (partial_.size() < kPrefixBytes) break;
      if (Status s = CheckLength(PrefixLength()); !s.ok()) return status_ = s;
    }
    const std::uint32_t length = PrefixLength();
    Status decoded;
    if (partial_.size() == kPrefixBytes && bytes.size() >= length) {
      // The whole body is in this Feed (or the frame is empty): decode it in place, no copy.
      decoded = Decode(bytes.first(length));
      bytes = bytes.subspan(length);
      partial_.clear();
    } else {
      append(std::min(bytes_to_next_message(), bytes.size()));
      if (bytes_to_next_message() > 0) break;
      decoded = Decode(std::as_bytes(std::span(partial_)).subspan(kPrefixBytes));
      ReleasePartial();
    }
    if (!decoded.ok()) return status_ = decoded;
  }
  return absl::OkStatus();
}

std::optional<proto::ControlMessage> ControlFrameDecoder::Pop() {
  if (ready_.empty()) return std::nullopt;
  proto::ControlMessage message = std::move(ready_.front());
  ready_.pop_front();
  return message;
}

}  // namespace phub::transport
