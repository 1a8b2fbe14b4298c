// What a process holds right now, from /proc (Linux): resident memory, its peak, open
// descriptors and CPU time. For tests that bound what a hostile client can make phubd hold.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <sstream>
#include <string>

#include "tests/integration/process.h"

namespace phub::testing {

struct ProcessStats {
  std::uint64_t rss_bytes = 0;       // VmRSS
  std::uint64_t peak_rss_bytes = 0;  // VmHWM: the most it was ever resident, so a transient
                                     // allocation between two samples still shows
  int open_fds = 0;                  // entries of /proc/PID/fd
  double cpu_seconds = 0;            // utime + stime
};

// nullopt if the process is gone.
inline std::optional<ProcessStats> ReadProcessStats(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  ProcessStats stats;
  std::istringstream status(ReadFile(proc + "/status"));
  std::string line;
  bool found = false;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    fields >> key >> kib;
    if (key == "VmRSS:") {
      stats.rss_bytes = kib * 1024;
      found = true;
    }
    if (key == "VmHWM:") stats.peak_rss_bytes = kib * 1024;
  }
  if (!found) return std::nullopt;  // gone, or a zombie

  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(proc + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++stats.open_fds;
  }

  // /proc/PID/stat: "pid (comm) state ..." — comm may hold spaces, so fields count from the
  // last ')'. utime and stime are fields 14 and 15 (1-based), in clock ticks.
  const std::string stat = ReadFile(proc + "/stat");
  const auto close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream rest(stat.substr(close + 2));
    std::string field;
    std::uint64_t utime = 0, stime = 0;
    for (int i = 3; i <= 15 && rest >> field; ++i) {
      if (i == 14) utime = std::stoull(field);
      if (i == 15) stime = std::stoull(field);
    }
    stats.cpu_seconds =
        static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return stats;
}

}  // namespace phub::testing
