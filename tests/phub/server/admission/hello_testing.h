// What the Hello checks' tests share (hello_check_test.cc, hello_check_racks_test.cc): a valid
// Hello of a job of 4, admission options, and a matcher for what a refusal names.
#pragma once

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "phub/common/version.h"
#include "phub/server/admission/hello_check.h"

namespace phub::server {

// A refusal's message and fix together; every check looks for the values it must name here.
inline std::string Text(const proto::Error& error) { return error.message() + " | " + error.fix(); }

inline ::testing::AssertionResult Names(const proto::Error& error, const std::string& part) {
  if (Text(error).find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << Text(error) << "\" lacks \"" << part << "\"";
}

inline AdmissionOptions Options(std::uint32_t world_size = 4) {
  AdmissionOptions options;
  options.limits.max_world_size = world_size;
  return options;
}

inline proto::Hello MakeHello(std::uint32_t rank, std::uint32_t world_size = 4) {
  proto::Hello hello;
  hello.set_protocol_version(kProtocolVersion);
  hello.set_rank(rank);
  hello.set_world_size(world_size);
  auto add = [&](const std::string& name, std::uint64_t elements) {
    proto::TensorSpec* t = hello.add_tensors();
    t->set_name(name);
    t->set_elements(elements);
  };
  add("conv1.weight", 9408);
  add("fc.weight", 2048000);
  add("fc.bias", 1000);
  return hello;
}

inline const std::vector<bool> kNoneTaken(4, false);

// The token proof was checked before (the control plane: token_proof_test.cc and
// tests/integration/authentication_test.cc).
inline std::optional<proto::Error> Check(const proto::Hello& hello, const AdmissionOptions& options,
                                  const proto::Hello* first, const std::vector<bool>& taken) {
  return CheckHello(hello, options, first, taken);
}

}  // namespace phub::server
