// The control-frame fuzzer's setting and input format, shared by control_frame_fuzzer.cc and
// fuzz_seed_writer.cc.
//
// Input: byte 0 = k (mod 16); the next k bytes are feed sizes (byte + 1, used in turn; k = 0:
// one Feed of everything); the rest is the byte stream a peer sent on a control connection.
#pragma once

#include <cstdint>
#include <vector>

#include "phub/common/version.h"
#include "phub/server/admission/admission_options.h"
#include "phub/transport/control_frame.h"
#include "proto/phub.pb.h"

namespace phub::fuzz {

inline constexpr std::uint8_t kMaxFeedSizes = 16;

// Small limits, so that inputs of a few KiB reach both sides of each.
inline transport::ControlFrameLimits FuzzFrameLimits() {
  transport::ControlFrameLimits limits;
  limits.max_frame_bytes = 2048;
  limits.max_tensors = 16;
  return limits;
}

// phubd's side: a job of 4 ranks with a token; rank 0 has joined. Small job limits (16
// tensors, 1 MiB of model in chunks of 4 KiB) so that both sides of each are reached.
inline server::AdmissionOptions FuzzAdmissionOptions() {
  server::AdmissionOptions options;
  options.limits.max_world_size = 4;
  options.sharing.job_token = "fuzz-token";
  options.chunk_bytes = 4096;
  options.limits.max_tensors = 16;
  options.limits.max_model_bytes = 1 << 20;
  return options;
}
inline const std::vector<bool> kFuzzRanksTaken = {true, false, false, false};

// The Hello rank 0 was admitted with; `rank` changes only the rank.
inline proto::Hello FuzzHello(std::uint32_t rank) {
  proto::Hello hello;
  hello.set_protocol_version(kProtocolVersion);
  hello.set_token_proof("fuzz-proof");
  hello.set_rank(rank);
  hello.set_world_size(4);
  const char* names[] = {"conv.weight", "conv.bias", "fc.weight"};
  const std::uint64_t elements[] = {864, 32, 10240};
  for (int i = 0; i < 3; ++i) {
    proto::TensorSpec* t = hello.add_tensors();
    t->set_name(names[i]);
    t->set_elements(elements[i]);
  }
  return hello;
}

}  // namespace phub::fuzz
