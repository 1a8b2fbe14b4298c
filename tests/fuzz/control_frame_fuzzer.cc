// libFuzzer target: the control channel's decoder (phub/transport/tcp/control_frame.h) and the
// admission check that reads what it decodes (phub/server/hello_check.h).
//
// Input format: control_frame_fuzz_input.h. The stream is fed in those pieces to one decoder
// and in one piece to another: both must decode the same messages and end in the same status
// (how the bytes were split must never matter). Every Hello decoded goes through CheckHello as the
// control plane would run it (a job of 4 ranks, one already in); it must not crash and must only
// accept what fits.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include "phub/server/hello_check.h"
#include "phub/transport/tcp/control_frame.h"
#include "tests/fuzz/control_frame_fuzz_input.h"

namespace phub::fuzz {
namespace {

using transport::tcp::ControlFrameDecoder;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "control_frame_fuzzer: %s\n", what);
  std::abort();
}

const server::ServerOptions& Options() {
  static const auto* options = new server::ServerOptions(FuzzServerOptions());
  return *options;
}

const proto::Hello& First() {
  static const auto* first = new proto::Hello(FuzzHello(0));
  return *first;
}

void CheckAdmission(const proto::Hello& hello) {
  const std::vector<bool>& rank_taken = kFuzzRanksTaken;
  const auto& options = Options();
  auto alone = server::CheckHello(hello, options, nullptr, rank_taken);
  auto joined = server::CheckHello(hello, options, &First(), rank_taken);
  // What admission lets in, the control plane indexes by rank and the key table is built from.
  for (const auto* verdict : {&alone, &joined}) {
    if (verdict->has_value()) {
      if ((*verdict)->message().empty() || (*verdict)->fix().empty()) {
        Fail("CheckHello refused without saying what and how to fix it");
      }
      continue;
    }
    if (hello.rank() >= options.world_size || rank_taken[hello.rank()]) {
      Fail("CheckHello admitted a rank out of range or already taken");
    }
    if (hello.tensors_size() == 0) Fail("CheckHello admitted an empty tensor table");
    if (hello.job_token() != options.job_token) Fail("CheckHello admitted a wrong token");
  }
  if (!joined.has_value()) {
    bool same = hello.tensors_size() == First().tensors_size();
    for (int i = 0; same && i < hello.tensors_size(); ++i) {
      same = hello.tensors(i).name() == First().tensors(i).name() &&
             hello.tensors(i).elements() == First().tensors(i).elements();
    }
    if (!same) Fail("CheckHello admitted a tensor table unlike the first worker's");
  }
}

}  // namespace
}  // namespace phub::fuzz

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace phub::fuzz;
  using phub::transport::tcp::ControlFrameDecoder;
  if (size == 0) return 0;
  const std::size_t k = std::min<std::size_t>(data[0] % kMaxFeedSizes, size - 1);
  const std::uint8_t* splits = data + 1;
  std::span<const std::byte> stream(reinterpret_cast<const std::byte*>(data + 1 + k), size - 1 - k);

  ControlFrameDecoder pieces(FuzzFrameLimits());
  ControlFrameDecoder whole(FuzzFrameLimits());
  std::vector<std::string> from_pieces;
  std::vector<std::string> from_whole;

  if (!pieces.Feed({}).ok()) Fail("an empty Feed failed a fresh decoder");
  std::size_t at = 0;
  for (std::size_t i = 0; at < stream.size(); ++i) {
    const std::size_t n =
        std::min<std::size_t>(k == 0 ? stream.size() : splits[i % k] + 1u, stream.size() - at);
    const bool ok = pieces.Feed(stream.subspan(at, n)).ok();
    at += n;
    while (auto message = pieces.Pop()) {
      if (message->has_hello()) CheckAdmission(message->hello());
      from_pieces.push_back(message->SerializeAsString());
    }
    if (!ok) break;
    if (pieces.buffered_bytes() > FuzzFrameLimits().max_frame_bytes + 4u) {
      Fail("the decoder holds more than one frame's worth of bytes");
    }
  }
  (void)whole.Feed(stream);
  while (auto message = whole.Pop()) from_whole.push_back(message->SerializeAsString());

  if (from_pieces != from_whole) Fail("split and whole feeds decoded different messages");
  if (pieces.status() != whole.status()) Fail("split and whole feeds ended in different states");
  if (pieces.status().ok() && pieces.buffered_bytes() != whole.buffered_bytes()) {
    Fail("split and whole feeds hold different unfinished frames");
  }
  return 0;
}
