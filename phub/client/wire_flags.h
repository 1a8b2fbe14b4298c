// --wire and --wire-weights, declared once for every program that runs a PsClient (phub-worker,
// the test and bench workers), so they mean the same everywhere (docs/operations.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "phub/client/ps_client.h"
#include "phub/kernels/wire_format.h"

namespace phub::client {

inline void AddWireFlags(CLI::App& app, PsClientOptions& options) {
  app.add_option_function<std::string>(
         "--wire",
         [&options](const std::string& name) { options.wire = *kernels::ParseWireFormat(name); },
         "PS: the format gradients travel in: fp32, or bf16/fp16 (half the bytes; phubd still "
         "sums into float32 weights). The same on every worker")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->default_str(kernels::WireFormatName(options.wire));
  app.add_option_function<std::string>(
         "--wire-weights",
         [&options](const std::string& v) { options.wire_weights = v == "wire"; },
         "PS with a compact --wire: the weights come back in it too (wire) or in float32 "
         "(fp32)")
      ->check(CLI::IsMember({"wire", "fp32"}))
      ->default_str(options.wire_weights ? "wire" : "fp32");
}

}  // namespace phub::client
