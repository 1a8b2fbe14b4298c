#include "worker/train/supervisor.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>

#include "spdlog/spdlog.h"

namespace phub::worker {

namespace {

std::atomic<pid_t> g_child{0};

void ForwardSignal(int signal) {
  const pid_t child = g_child.load();
  if (child > 0) kill(child, signal);
}

// Starts the child; -1 when fork fails.
pid_t Spawn(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    execv("/proc/self/exe", argv.data());
    std::fprintf(stderr, "phub-worker: cannot run itself again: %s\n", std::strerror(errno));
    _exit(127);
  }
  return pid;
}

}  // namespace

std::vector<std::string> WithoutRestartsFlag(int argc, char** argv) {
  std::vector<std::string> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--restarts") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--restarts=", 0) == 0) continue;
    args.push_back(a);
  }
  return args;
}

int RunSupervised(const std::vector<std::string>& args, int restarts) {
  std::signal(SIGTERM, ForwardSignal);
  std::signal(SIGINT, ForwardSignal);
  for (int attempt = 0;; ++attempt) {
    const pid_t pid = Spawn(args);
    if (pid < 0) {
      spdlog::error("--restarts: fork failed: {}", std::strerror(errno));
      return 1;
    }
    g_child = pid;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
      if (errno != EINTR) {
        spdlog::error("--restarts: waitpid: {}", std::strerror(errno));
        return 1;
      }
    }
    g_child = 0;
    std::string how;
    if (WIFEXITED(status)) {
      const int code = WEXITSTATUS(status);
      if (code == 0 || code == 2 || code == 127) return code;
      how = "exited with " + std::to_string(code);
    } else if (WIFSIGNALED(status)) {
      const int signal = WTERMSIG(status);
      if (signal == SIGTERM || signal == SIGINT) return 128 + signal;  // asked to stop
      how = std::string("was killed by signal ") + strsignal(signal);
    }
    if (attempt >= restarts) {
      spdlog::error("the worker {}; no restart left (--restarts {})", how, restarts);
      return 1;
    }
    spdlog::warn("the worker {}; restarting it ({} of {}): it rejoins its job", how,
                 attempt + 1, restarts);
  }
}

}  // namespace phub::worker
