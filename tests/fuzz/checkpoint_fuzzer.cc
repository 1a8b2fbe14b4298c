// libFuzzer target: DecodeCheckpoint (phub/server/checkpoint/checkpoint_file.h), the reader phubd runs on a
// checkpoint file, on the input as it is and on the input "resealed": every checksum the input
// has room for recomputed over what it holds, so that mutations get past the crc32s into the
// size, layout and optimizer checks behind them. Whatever it accepts must be a snapshot
// ValidateSnapshot accepts and that EncodeCheckpoint gives back byte for byte (the format has
// no slack: a field read unchecked or from the wrong offset shows up as a difference); every
// refusal must name the file.
#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "phub/server/checkpoint/checkpoint_file.h"

namespace {

constexpr char kName[] = "fuzz-input";

std::uint32_t U32(const std::string& b, std::uint64_t at) {
  std::uint32_t v;
  std::memcpy(&v, b.data() + at, 4);
  return v;
}

void PutCrc(std::string& b, std::uint64_t from, std::uint64_t bytes, std::uint64_t at) {
  const auto crc = static_cast<std::uint32_t>(
      crc32_z(0, reinterpret_cast<const Bytef*>(b.data() + from), bytes));
  std::memcpy(b.data() + at, &crc, 4);
}

// Walks the layout of checkpoint_file.h as far as the input allows, rewriting each checksum
// (and the trailer's file size) to match; stops where a section would run past the end.
std::string Reseal(std::string b) {
  const std::uint64_t size = b.size();
  if (size < 16 + 4) return b;
  const std::uint64_t header = 16 + std::uint64_t{U32(b, 12)};
  if (header + 4 > size) return b;
  PutCrc(b, 0, header, header);
  const std::uint32_t chunks = header >= 20 ? U32(b, header - 4) : 0;
  const std::uint64_t limit = size >= 20 ? size - 20 : 0;
  std::uint64_t at = header + 4;
  for (std::uint32_t i = 0; i < chunks && at + 24 <= limit; ++i) {
    PutCrc(b, at, 20, at + 20);
    const std::uint64_t arrays =
        1 + static_cast<std::uint8_t>(b[at + 16]) + static_cast<std::uint8_t>(b[at + 17]);
    const std::uint64_t data = std::uint64_t{4} * U32(b, at + 4) * arrays;
    if (at + 24 + data + 4 > limit) break;
    PutCrc(b, at + 24, data, at + 24 + data);
    at += 24 + data + 4;
  }
  if (std::memcmp(b.data() + size - 20, "PHUBTAIL", 8) == 0) {
    std::memcpy(b.data() + size - 12, &size, 8);
  }
  PutCrc(b, size - 20, 16, size - 4);
  return b;
}

void Check(const std::string& input) {
  auto decoded = phub::server::DecodeCheckpoint(input, kName);
  if (!decoded.ok()) {
    const std::string message(decoded.status().message());
    if (message.find(std::string("checkpoint '") + kName + "'") == std::string::npos) {
      std::fprintf(stderr, "a refusal does not name the file: %s\n", message.c_str());
      std::abort();
    }
    return;
  }
  if (auto valid = phub::server::ValidateSnapshot(*decoded); !valid.ok()) {
    std::fprintf(stderr, "DecodeCheckpoint accepted what ValidateSnapshot refuses: %s\n",
                 std::string(valid.message()).c_str());
    std::abort();
  }
  if (phub::server::CheckpointBytes(*decoded) != input.size() ||
      phub::server::EncodeCheckpoint(*decoded) != input) {
    std::fprintf(stderr, "EncodeCheckpoint(DecodeCheckpoint(x)) != x (%zu bytes)\n", input.size());
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  Check(input);
  const std::string resealed = Reseal(input);
  if (resealed != input) Check(resealed);
  return 0;
}
