#include "tests/integration/phubd_launcher.h"

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <stdexcept>
#include <thread>

#include "tests/support/free_port.h"

namespace phub::testing {

std::string PhubdPath() { return PHUB_PHUBD_PATH; }
std::string TestWorkerPath() { return PHUB_TEST_WORKER_PATH; }
std::string PhubWorkerPath() { return PHUB_WORKER_PATH; }

RunningPhubd StartPhubd(const TempDir& dir, const std::vector<std::string>& args) {
  return StartPhubd(dir, args, PhubdRlimits{});
}

RunningPhubd StartPhubd(const TempDir& dir, const std::vector<std::string>& args,
                        const PhubdRlimits& limits) {
  return StartPhubdOnPort(dir, 0, args, limits);
}

namespace {

RunningPhubd StartOnce(const TempDir& dir, std::uint16_t control_port,
                       const std::vector<std::string>& args, const PhubdRlimits& limits);

}  // namespace

RunningPhubd StartPhubdOnPort(const TempDir& dir, std::uint16_t control_port,
                              const std::vector<std::string>& args, const PhubdRlimits& limits) {
  auto base = std::find(args.begin(), args.end(), "--data-port-base");
  if (base == args.end() || std::next(base) == args.end() || *std::next(base) != "auto") {
    return StartOnce(dir, control_port, args, limits);
  }
  std::vector<std::string> chosen = args;
  const auto value = std::next(chosen.begin(), std::distance(args.begin(), base) + 1);
  for (int attempt = 1;; ++attempt) {
    const std::uint16_t port = FreeLoopbackPort();
    *value = std::to_string(port);
    try {
      RunningPhubd phubd = StartOnce(dir, control_port, chosen, limits);
      phubd.data_port_base = port;
      return phubd;
    } catch (const std::runtime_error& e) {
      if (attempt == 5 ||
          std::string(e.what()).find("Address already in use") == std::string::npos) {
        throw;
      }
    }
  }
}

namespace {

RunningPhubd StartOnce(const TempDir& dir, std::uint16_t control_port,
                       const std::vector<std::string>& args, const PhubdRlimits& limits) {
  static int counter = 0;
  std::string tag = std::to_string(counter++);
  RunningPhubd phubd;
  phubd.log_path = dir.File("phubd" + tag + ".log");
  std::string port_file = dir.File("phubd" + tag + ".port");
  std::vector<std::string> argv = {PhubdPath(),   "--port",  std::to_string(control_port),
                                   "--port-file", port_file, "--listen",
                                   "127.0.0.1",   "--no-pin"};
  argv.insert(argv.end(), args.begin(), args.end());
  if (limits.open_files > 0 || limits.address_space_bytes > 0) {
    std::string script;
    if (limits.open_files > 0) script += "ulimit -n " + std::to_string(limits.open_files) + " && ";
    if (limits.address_space_bytes > 0) {
      script += "ulimit -v " + std::to_string(limits.address_space_bytes / 1024) + " && ";
    }
    script += "exec \"$@\"";
    argv.insert(argv.begin(), {"/bin/sh", "-c", script, "phubd"});
  }
  phubd.process = Process::Start(argv, phubd.log_path);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::string port = ReadFile(port_file);
    if (!port.empty()) {
      phubd.port = static_cast<std::uint16_t>(std::stoi(port));
      return phubd;
    }
    if (!phubd.process.Running()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  throw std::runtime_error("phubd did not start; its log:\n" + ReadFile(phubd.log_path));
}

}  // namespace

}  // namespace phub::testing
