// libFuzzer target: the TCP rendezvous's frame decoder (phub/rendezvous/frame.h), what its
// server and clients run on every byte a peer sends.
//
// Input: byte 0 = k (mod 16); the next k bytes are feed sizes (byte + 1, used in turn; k = 0:
// one Feed of everything); the rest is the byte stream a peer sent. It is fed in those pieces
// to one decoder and in one piece to another. Must hold:
//   - both decode the same messages and end in the same status (the split never matters);
//   - a decoder never holds more than one frame (prefix + kMaxFrameBytes);
//   - the decoder accepts only canonical frames: each decoded message encodes (EncodeFrame)
//     back to exactly the bytes it came from, and those decode to the same message;
//   - every refusal says why.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "phub/rendezvous/frame.h"

namespace phub::fuzz {
namespace {

using rendezvous::FrameDecoder;
using rendezvous::kFramePrefixBytes;
using rendezvous::kMaxFrameBytes;
using rendezvous::Message;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "rendezvous_frame_fuzzer: %s\n", what);
  std::abort();
}

std::vector<Message> Drain(FrameDecoder& decoder) {
  std::vector<Message> out;
  while (auto m = decoder.Pop()) out.push_back(*std::move(m));
  return out;
}

}  // namespace
}  // namespace phub::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace phub::fuzz;
  if (size == 0) return 0;
  const std::size_t k = std::min<std::size_t>(data[0] % 16, size - 1);
  const std::uint8_t* sizes = data + 1;
  const auto stream = std::as_bytes(std::span(data + 1 + k, size - 1 - k));

  FrameDecoder pieces, whole;
  std::vector<Message> from_pieces;
  phub::Status pieces_status;
  std::size_t at = 0;
  for (std::size_t i = 0; at < stream.size(); ++i) {
    const std::size_t n =
        k == 0 ? stream.size() : std::min<std::size_t>(sizes[i % k] + 1, stream.size() - at);
    pieces_status = pieces.Feed(stream.subspan(at, n));
    at += n;
    if (pieces.buffered_bytes() > kFramePrefixBytes + kMaxFrameBytes) {
      Fail("the decoder holds more than one frame");
    }
    for (auto& m : Drain(pieces)) from_pieces.push_back(std::move(m));
    if (!pieces_status.ok()) break;
  }
  const phub::Status whole_status = whole.Feed(stream);
  const std::vector<Message> from_whole = Drain(whole);

  if (pieces_status != whole_status) Fail("the split changed the decoder's status");
  if (from_pieces != from_whole) Fail("the split changed the decoded messages");
  if (!whole_status.ok() && whole_status.message().empty()) Fail("a refusal without a reason");

  // The frames lie one after another from the start of the stream.
  std::size_t offset = 0;
  for (const Message& m : from_whole) {
    auto encoded = phub::rendezvous::EncodeFrame(m);
    if (!encoded.ok()) Fail("EncodeFrame refused a message the decoder accepted");
    if (offset + encoded->size() > stream.size() ||
        std::memcmp(encoded->data(), stream.data() + offset, encoded->size()) != 0) {
      Fail("EncodeFrame(decoded) differs from the frame's bytes: a non-canonical frame got in");
    }
    offset += encoded->size();
    auto again =
        phub::rendezvous::DecodeBody(std::as_bytes(std::span(*encoded).subspan(kFramePrefixBytes)));
    if (!again.ok() || !(*again == m)) Fail("DecodeBody(EncodeFrame(m)) != m");
  }
  return 0;
}
