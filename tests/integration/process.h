// Starting, waiting for and killing real processes in integration tests (phubd, workers).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace phub::testing {

class Process {
 public:
  // Starts `argv[0]` with `argv`; stdout and stderr go to `log_path` (appended) if not empty.
  static Process Start(const std::vector<std::string>& argv, const std::string& log_path = "");
  Process() = default;
  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  ~Process();  // SIGKILLs a process still running

  // Exit code, or 128+signal if killed; nullopt if still running after `timeout`.
  std::optional<int> Wait(std::chrono::milliseconds timeout);
  bool Running();
  void Kill(int signal);
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// A fresh directory under TMPDIR, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Reads a whole file ("" if missing).
std::string ReadFile(const std::string& path);

// Polls `done` every 10 ms; false if it is still false after `bound`.
bool WaitFor(const std::function<bool()>& done, std::chrono::milliseconds bound);

// A log another process writes (phubd's), read once it holds what the test is about to check.
// A line phubd writes after the workers exit (a job's "ended", written when phubd has seen
// every control connection close) may not be in the file yet when the workers' Wait returns:
// reading the log at once raced with it and failed on a loaded machine. Waits (polling, up to
// `bound`) until the log from byte `from` on contains every one of `lines`, and returns that
// part of the log; on timeout returns what is there, so the caller's check fails naming it.
std::string AwaitLog(const std::string& path, const std::vector<std::string>& lines,
                     std::chrono::milliseconds bound = std::chrono::seconds(30),
                     std::size_t from = 0);

}  // namespace phub::testing
