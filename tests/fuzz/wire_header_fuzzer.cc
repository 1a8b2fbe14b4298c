// libFuzzer target: DecodeWireHeader on the first 32 bytes of the input. Whatever it accepts
// must encode back to exactly those bytes (the header has no slack: a field the decoder lets
// through unchecked, or one it reads from the wrong offset, shows up as a difference).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "phub/transport/wire_header.h"

using phub::transport::DecodeWireHeader;
using phub::transport::EncodeWireHeader;
using phub::transport::kWireHeaderBytes;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < kWireHeaderBytes) return 0;
  std::span<const std::byte, kWireHeaderBytes> bytes(reinterpret_cast<const std::byte*>(data),
                                                     kWireHeaderBytes);
  auto decoded = DecodeWireHeader(bytes);
  if (!decoded.ok()) {
    if (decoded.status().message().empty()) {
      std::fprintf(stderr, "DecodeWireHeader refused a header without saying why\n");
      std::abort();
    }
    return 0;
  }
  const auto encoded = EncodeWireHeader(*decoded);
  if (std::memcmp(encoded.data(), data, kWireHeaderBytes) != 0) {
    std::fprintf(stderr, "EncodeWireHeader(DecodeWireHeader(x)) != x for op %s\n",
                 phub::transport::OpName(decoded->op).c_str());
    std::abort();
  }
  return 0;
}
