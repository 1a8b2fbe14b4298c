#include "phub/metrics/process_metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace phub::metrics {
namespace {

// /proc/self/stat fields (proc(5)), 1-based: utime 14, stime 15, starttime 22, vsize 23, rss 24.
struct ProcStat {
  double utime_ticks = NAN, stime_ticks = NAN, start_ticks = NAN, vsize = NAN, rss_pages = NAN;
};

ProcStat ReadProcStat() {
  ProcStat stat;
  std::ifstream in("/proc/self/stat");
  std::string line;
  if (!std::getline(in, line)) return stat;
  // The command name (field 2) is in parentheses and may hold spaces: count from after it.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return stat;
  std::istringstream fields(line.substr(close + 2));
  std::string field;
  for (int i = 3; fields >> field; ++i) {
    const double v = std::strtod(field.c_str(), nullptr);
    if (i == 14) stat.utime_ticks = v;
    if (i == 15) stat.stime_ticks = v;
    if (i == 22) stat.start_ticks = v;
    if (i == 23) stat.vsize = v;
    if (i == 24) {
      stat.rss_pages = v;
      break;
    }
  }
  return stat;
}

double BootTimeSeconds() {
  std::ifstream in("/proc/stat");
  std::string key;
  double value = NAN;
  while (in >> key) {
    if (key == "btime") {
      in >> value;
      return value;
    }
    in.ignore(1 << 20, '\n');
  }
  return NAN;
}

double OpenFds() {
  std::error_code ec;
  double n = 0;
  for (std::filesystem::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end;
       it.increment(ec)) {
    ++n;
  }
  return ec ? NAN : n;
}

}  // namespace

void AddProcessMetrics(Registry& registry) {
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
  registry.AddCallbackGauge("process_resident_memory_bytes", "Resident memory size in bytes.", {},
                            [page] { return ReadProcStat().rss_pages * page; });
  registry.AddCallbackGauge("process_virtual_memory_bytes", "Virtual memory size in bytes.", {},
                            [] { return ReadProcStat().vsize; });
  registry.AddCallbackCounter("process_cpu_seconds_total",
                              "Total user and system CPU time spent in seconds.", {}, [ticks] {
                                const ProcStat s = ReadProcStat();
                                return (s.utime_ticks + s.stime_ticks) / ticks;
                              });
  // Fixed for the process's life: computed once.
  const double start = BootTimeSeconds() + ReadProcStat().start_ticks / ticks;
  registry.AddCallbackGauge("process_start_time_seconds",
                            "Start time of the process since unix epoch in seconds.", {},
                            [start] { return start; });
  registry.AddCallbackGauge("process_open_fds", "Number of open file descriptors.", {}, OpenFds);
  registry.AddCallbackGauge("process_max_fds", "Maximum number of open file descriptors.", {}, [] {
    rlimit limit{};
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return static_cast<double>(NAN);
    return limit.rlim_cur == RLIM_INFINITY ? static_cast<double>(INFINITY)
                                           : static_cast<double>(limit.rlim_cur);
  });
}

}  // namespace phub::metrics
