// --wire and --wire-weights, declared once for every program that runs a PsClient (phub-worker,
// the test and bench workers), so they mean the same everywhere (docs/operations.md).
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "phub/kernels/wire_options.h"

namespace phub::client {

// `also`: other exchanges' wire formats that --wire sets too (the ring's), so that a baseline
// is measured with the same option.
inline void AddWireFlags(CLI::App& app, kernels::WireOptions& options,
                         std::vector<kernels::WireFormat*> also = {}) {
  app.add_option_function<std::string>(
         "--wire",
         [&options, also](const std::string& name) {
           options.format = *kernels::ParseWireFormat(name);
           for (kernels::WireFormat* w : also) *w = options.format;
         },
         "The format gradients travel in: fp32, or bf16/fp16 (half the bytes; phubd, or the "
         "ring, still sums in float32). The same on every worker")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}))
      ->default_str(kernels::WireFormatName(options.format));
  app.add_option_function<std::string>(
         "--wire-weights",
         [&options](const std::string& v) { options.weights = v == "wire"; },
         "PS with a compact --wire: the weights come back in it too, as rounded changes of the "
         "float32 weights every worker holds (wire), or in float32 (fp32)")
      ->check(CLI::IsMember({"wire", "fp32"}))
      ->default_str(options.weights ? "wire" : "fp32");
  app.add_option_function<std::string>(
         "--error-feedback",
         [&options](const std::string& v) { options.error_feedback = v == "on"; },
         "PS with a compact --wire: carry what rounding drops from each gradient into the next "
         "push (on), or drop it (off: only to measure what feedback is worth)")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str(options.error_feedback ? "on" : "off");
}

}  // namespace phub::client
