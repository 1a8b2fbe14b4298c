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
  std::uint16_t data_port_base = 0;  // with `--data-port-base auto`: the base it listens on
  std::string log_path;
};

// `args` are phubd flags besides --port/--port-file. Aborts the test (throws) if phubd does not
// come up within 20 s; the log is then in the exception's message. `--data-port-base auto`
// picks a free base, and another one if phubd finds one of its ports taken meanwhile (ctest
// runs tests side by side: a port free a moment ago may not be now); data_port_base says which.
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
