// Starts a real phubd process for a test, on a free port, with its log in the test's temp dir.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tests/integration/process.h"

namespace phub::testing {

struct RunningPhubd {
  Process process;
  std::uint16_t port = 0;
  std::string log_path;
};

// `args` are phubd flags besides --port/--port-file. Aborts the test (throws) if phubd does not
// come up within 20 s; the log is then in the exception's message.
RunningPhubd StartPhubd(const TempDir& dir, const std::vector<std::string>& args);

// Resource limits for the phubd process (0 = inherit the test's). Set by a /bin/sh wrapper that
// execs phubd, so the process (and its pid) is phubd's own.
struct PhubdRlimits {
  int open_files = 0;                     // RLIMIT_NOFILE
  std::uint64_t address_space_bytes = 0;  // RLIMIT_AS: a runaway allocation fails, not the box
};
RunningPhubd StartPhubd(const TempDir& dir, const std::vector<std::string>& args,
                        const PhubdRlimits& limits);

// On a given control port (0: any), for a file that must name it before phubd starts (the
// racks-of-racks topology).
RunningPhubd StartPhubdOnPort(const TempDir& dir, std::uint16_t control_port,
                              const std::vector<std::string>& args,
                              const PhubdRlimits& limits = {});

// Paths of the binaries under test, set by CMake.
std::string PhubdPath();
std::string TestWorkerPath();
std::string PhubWorkerPath();  // phub-worker, the product's worker

}  // namespace phub::testing
