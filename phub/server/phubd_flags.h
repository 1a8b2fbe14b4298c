// phubd's command line: every flag bound to its field of ServerOptions, in the --help groups
// that mirror the options' structs (listening and cores, limits and deadlines, checkpoints,
// metrics, NICs and placement, RDMA, the jobs' model and default optimizer, sharing a PBox,
// racks of racks, and the experiment knobs last). Only phubd_main.cc uses it.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/server/server_options.h"

namespace phub::server {

// What the command line says that is not a field of ServerOptions as it stands: ApplyFlags
// turns it into fields once parsed, and main acts on the rest (--log-level, --print-core-map,
// --token-file, --topology and --rack).
struct PhubdFlags {
  std::string log_level = "info";
  bool no_pin = false;
  std::string nics;  // --nics, comma-separated
  bool print_core_map = false;
  double nic_gbps = 0;
  std::vector<std::string> job_weights;  // NAME=W each
  bool nagle = false;
  std::string token_file;
  std::string topology_file, rack_name;
  CLI::Option* deprecated_world_size = nullptr;  // --world-size, --max-world-size's old name
};

void AddPhubdFlags(CLI::App& app, ServerOptions& options, PhubdFlags& flags);

// After parsing: --no-pin, --nic-gbps, --nics, --job-weight and --tcp-nagle into `options`, and
// a warning for a deprecated flag. InvalidArgument naming a malformed --job-weight.
Status ApplyFlags(const PhubdFlags& flags, ServerOptions& options);

}  // namespace phub::server
