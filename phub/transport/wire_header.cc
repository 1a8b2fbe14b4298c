#include "phub/transport/wire_header.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "phub/common/version.h"

namespace phub::transport {
namespace {

// The header is defined little-endian; every machine we build for is little-endian, which
// this guard makes explicit instead of byte-swapping for nobody.
static_assert(std::endian::native == std::endian::little, "PHub's wire format assumes little-endian");

template <typename T>
void Put(EncodedHeader& out, std::size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(T));
}

template <typename T>
T Get(std::span<const std::byte, kWireHeaderBytes> in, std::size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

}  // namespace

std::string OpName(Op op) {
  switch (op) {
    case Op::kPush: return "PUSH";
    case Op::kWeights: return "WEIGHTS";
    case Op::kInit: return "INIT";
    case Op::kAttach: return "ATTACH";
    case Op::kBye: return "BYE";
    case Op::kError: return "ERROR";
  }
  return absl::StrCat("op(", static_cast<int>(op), ")");
}

EncodedHeader EncodeWireHeader(const WireHeader& header) {
  EncodedHeader out{};
  Put<std::uint32_t>(out, 0, kWireMagic);
  Put<std::uint16_t>(out, 4, kProtocolVersion);
  Put<std::uint8_t>(out, 6, static_cast<std::uint8_t>(header.op));
  Put<std::uint8_t>(out, 7, 0);
  Put<std::uint32_t>(out, 8, header.worker);
  Put<std::uint32_t>(out, 12, header.chunk);
  Put<std::uint64_t>(out, 16, header.iteration);
  Put<std::uint32_t>(out, 24, header.payload_bytes);
  Put<std::uint32_t>(out, 28, 0);
  return out;
}

StatusOr<WireHeader> DecodeWireHeader(std::span<const std::byte, kWireHeaderBytes> bytes) {
  auto magic = Get<std::uint32_t>(bytes, 0);
  if (magic != kWireMagic) {
    return absl::InvalidArgumentError(absl::StrCat(
        "bad magic 0x", absl::Hex(magic), " (expected 0x", absl::Hex(kWireMagic),
        "): the peer is not a PHub worker or the stream is out of sync"));
  }
  auto version = Get<std::uint16_t>(bytes, 4);
  if (version != kProtocolVersion) {
    return absl::InvalidArgumentError(absl::StrCat("protocol version ", version,
                                                   " but this side speaks ", kProtocolVersion,
                                                   ": run the same PHub release on both ends"));
  }
  auto op = Get<std::uint8_t>(bytes, 6);
  if (op < static_cast<std::uint8_t>(Op::kPush) || op > static_cast<std::uint8_t>(Op::kError)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown op ", op));
  }
  if (auto flags = Get<std::uint8_t>(bytes, 7); flags != 0) {
    return absl::InvalidArgumentError(absl::StrCat("flags must be 0, got ", flags));
  }
  if (auto reserved = Get<std::uint32_t>(bytes, 28); reserved != 0) {
    return absl::InvalidArgumentError(absl::StrCat("reserved field must be 0, got ", reserved));
  }
  WireHeader header;
  header.op = static_cast<Op>(op);
  header.worker = Get<std::uint32_t>(bytes, 8);
  header.chunk = Get<std::uint32_t>(bytes, 12);
  header.iteration = Get<std::uint64_t>(bytes, 16);
  header.payload_bytes = Get<std::uint32_t>(bytes, 24);
  if (header.payload_bytes > kMaxPayloadBytes) {
    return absl::InvalidArgumentError(absl::StrCat("payload of ", header.payload_bytes,
                                                   " bytes exceeds the limit of ",
                                                   kMaxPayloadBytes));
  }
  return header;
}

}  // namespace phub::transport
