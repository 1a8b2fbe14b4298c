#include "tests/integration/phubd_launcher.h"

#include <filesystem>
#include <stdexcept>
#include <thread>

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

RunningPhubd StartPhubdOnPort(const TempDir& dir, std::uint16_t control_port,
                              const std::vector<std::string>& args, const PhubdRlimits& limits) {
  static int counter = 0;
  std::string tag = std::to_string(counter++);
  RunningPhubd phubd;
  phubd.log_path = dir.File("phubd" + tag + ".log");
  std::string port_file = dir.File("phubd" + tag + ".port");
  std::vector<std::string> argv = {PhubdPath(), "--port", std::to_string(control_port),
                                   "--port-file", port_file,
                                   "--listen", "127.0.0.1", "--no-pin"};
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

}  // namespace phub::testing
