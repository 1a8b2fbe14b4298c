// libFuzzer target: the control channel's decoder (phub/transport/control_frame.h) and the
// admission check that reads what it decodes (phub/server/admission/hello_check.h).
//
// Input format: control_frame_fuzz_input.h. The stream is fed in those pieces to one decoder
// and in one piece to another: both must decode the same messages and end in the same status
// (how the bytes were split must never matter). Every Hello decoded goes through the control
// plane's admission (a job of 4 ranks, one already in): CheckHello must admit only what fits,
// and CheckJobLimits must agree with a 128-bit sum of the model's bytes (no overflow slips
// through, nothing within the limits is refused).
#include <google/protobuf/stubs/logging.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "phub/common/token_proof.h"
#include "phub/kernels/aggregate_and_step.h"
#include "phub/server/admission/hello_check.h"
#include "phub/server/admission/job_limits.h"
#include "phub/server/admission/job_tokens.h"
#include "phub/transport/control_frame.h"
#include "tests/fuzz/control_frame_fuzz_input.h"

namespace phub::fuzz {
namespace {

using transport::ControlFrameDecoder;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "control_frame_fuzzer: %s\n", what);
  std::abort();
}

const server::AdmissionOptions& Options() {
  static const auto* options = new server::AdmissionOptions(FuzzAdmissionOptions());
  return *options;
}

const proto::Hello& First() {
  static const auto* first = new proto::Hello(FuzzHello(0));
  return *first;
}

void CheckLimitsAgainstReference(const proto::Hello& hello,
                                 const server::AdmissionOptions& options);

void CheckAdmission(const proto::Hello& hello) {
  const std::vector<bool>& rank_taken = kFuzzRanksTaken;
  const auto& options = Options();
  // The token proof is the control plane's to check (token_proof.h), against phubd's token
  // and the Challenge it sent: only the token's own proof passes.
  const std::string nonce(kChallengeNonceBytes, 'n');
  if (ProofMatches(hello.token_proof(), options.sharing.job_token, nonce, hello.job()) &&
      hello.token_proof() != TokenProof(options.sharing.job_token, nonce, hello.job())) {
    Fail("ProofMatches passed a proof other than the token's");
  }
  auto alone = server::CheckHello(hello, options, nullptr, rank_taken);
  auto joined = server::CheckHello(hello, options, &First(), rank_taken);
  // The job name a Hello carries becomes a file name under --job-tokens: whatever JobName
  // accepts must be a plain name.
  if (auto name = server::JobName(hello.job()); name.ok()) {
    if (name->empty() || name->size() > server::kMaxJobNameBytes || (*name)[0] == '.' ||
        name->find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                "0123456789._-") != std::string::npos) {
      Fail("JobName accepted a name that is not a plain file name");
    }
  }
  // What admission lets in, the control plane indexes by rank and the key table is built from.
  for (const auto* verdict : {&alone, &joined}) {
    if (verdict->has_value()) {
      if ((*verdict)->message().empty() || (*verdict)->fix().empty()) {
        Fail("CheckHello refused without saying what and how to fix it");
      }
      continue;
    }
    if (hello.rank() >= rank_taken.size() || rank_taken[hello.rank()]) {
      Fail("CheckHello admitted a rank out of range or already taken");
    }
    if (hello.world_size() != rank_taken.size()) {
      Fail("CheckHello admitted a world size other than the job's");
    }
    if (hello.tensors_size() == 0) Fail("CheckHello admitted an empty tensor table");
    // StartJob reads the job's optimizer without checking again: it must be valid.
    if (!server::JobOptimizer(hello, options.optimizer).ok()) {
      Fail("CheckHello admitted a bad optimizer");
    }
  }
  if (!joined.has_value()) {
    bool same = hello.tensors_size() == First().tensors_size();
    for (int i = 0; same && i < hello.tensors_size(); ++i) {
      same = hello.tensors(i).name() == First().tensors(i).name() &&
             hello.tensors(i).elements() == First().tensors(i).elements();
    }
    if (!same) Fail("CheckHello admitted a tensor table unlike the first worker's");
    const auto mine = server::JobOptimizer(hello, options.optimizer);
    const auto theirs = server::JobOptimizer(First(), options.optimizer);
    if (!mine.ok() || !theirs.ok() ||
        kernels::Describe(*mine) != kernels::Describe(*theirs)) {
      Fail("CheckHello admitted an optimizer unlike the first worker's");
    }
  }
  CheckLimitsAgainstReference(hello, options);
}

// The model's bytes as JobModelBytes counts them (float32 elements plus the bookkeeping of each
// chunk), summed in 128 bits: no tensor count the decoder lets through can overflow it.
unsigned __int128 ReferenceModelBytes(const proto::Hello& hello, std::uint64_t chunk_bytes) {
  const unsigned __int128 per_chunk = std::max<std::uint64_t>(chunk_bytes / sizeof(float), 1);
  unsigned __int128 total = 0;
  for (const proto::TensorSpec& t : hello.tensors()) {
    const unsigned __int128 e = t.elements();
    total += e * sizeof(float) + (e + per_chunk - 1) / per_chunk * server::kChunkBookkeepingBytes;
  }
  return total;
}

void CheckLimitsAgainstReference(const proto::Hello& hello,
                                 const server::AdmissionOptions& options) {
  const unsigned __int128 reference = ReferenceModelBytes(hello, options.chunk_bytes);
  const std::optional<std::uint64_t> bytes = server::JobModelBytes(hello, options.chunk_bytes);
  if (reference > UINT64_MAX) {
    if (bytes.has_value()) Fail("JobModelBytes missed an overflow");
  } else if (!bytes.has_value() || *bytes != reference) {
    Fail("JobModelBytes differs from the 128-bit sum");
  }
  const bool fits =
      static_cast<std::uint64_t>(hello.tensors_size()) <= options.limits.max_tensors &&
      reference <= options.limits.max_model_bytes;
  const std::optional<proto::Error> verdict = server::CheckJobLimits(hello, options);
  if (fits && verdict.has_value()) Fail("CheckJobLimits refused a job within the limits");
  if (!fits && !verdict.has_value()) Fail("CheckJobLimits admitted a job over the limits");
  if (verdict.has_value() && (verdict->message().empty() || verdict->fix().empty())) {
    Fail("CheckJobLimits refused without saying what and how to fix it");
  }
}

}  // namespace
}  // namespace phub::fuzz

// Protobuf logs an ERROR line for each string field that is not UTF-8; at thousands of runs a
// second that buried the fuzzer's own output and slowed it 4x.
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace phub::fuzz;
  using phub::transport::ControlFrameDecoder;
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
