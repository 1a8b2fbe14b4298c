// A worker in a child process that a test can SIGKILL (a crash leaves no Goodbye and no BYE),
// for the elastic tests. Fork it before the test makes any thread. The child reads phubd's port
// on `commands`, makes its worker with `join(port)` and Init()s it, answers "joined <resume
// iteration>" (or the error) on `answers`, then runs each command line it reads — "i N":
// iteration N; "p N": only the last tensor of N, so the others' chunks stay behind — answering
// "ok" or the error. Gradients are TestValue(seed, rank, N, ...), as RunIteration's.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <functional>
#include <string>

#include <gtest/gtest.h>

#include "tests/integration/in_process_worker.h"

namespace phub::testing {

struct ChildWorker {
  pid_t pid = -1;
  int commands = -1, answers = -1;

  static ChildWorker Fork(const std::function<InProcessWorker(std::uint16_t port)>& join,
                          std::uint64_t seed) {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return {};
    const pid_t pid = fork();
    if (pid == 0) {
      close(to_child[1]);
      close(from_child[0]);
      FILE* in = fdopen(to_child[0], "r");
      FILE* out = fdopen(from_child[1], "w");
      unsigned port = 0;
      if (std::fscanf(in, "%u", &port) != 1) _exit(2);
      InProcessWorker w = join(static_cast<std::uint16_t>(port));
      Status s = w.status.ok() ? w.client->Init() : w.status;
      std::fprintf(out, "%s %llu\n", s.ok() ? "joined" : std::string(s.message()).c_str(),
                   s.ok() ? static_cast<unsigned long long>(w.client->resume_iteration()) : 0ull);
      std::fflush(out);
      unsigned long long it = 0;
      char what[2] = {0, 0};
      while (s.ok() && std::fscanf(in, " %1s %llu", what, &it) == 2) {
        if (what[0] == 'p') {
          const auto last = static_cast<std::uint32_t>(w.grads.size() - 1);
          for (std::uint64_t i = 0; i < w.grads[last].size(); ++i) {
            w.grads[last][i] = TestValue(seed, w.client->rank(), it, last, i);
          }
          s = w.client->Push(last, w.grads[last]);
          if (s.ok()) s = w.client->Wait(last);
        } else {
          s = RunIteration(w, it, seed);
        }
        std::fprintf(out, "%s\n", s.ok() ? "ok" : std::string(s.message()).c_str());
        std::fflush(out);
      }
      _exit(s.ok() ? 0 : 1);
    }
    close(to_child[0]);
    close(from_child[1]);
    return {pid, to_child[1], from_child[0]};
  }
  void Say(const std::string& line) const {
    const std::string text = line + "\n";
    ASSERT_EQ(write(commands, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  }
  // Runs iteration `it` (the child answers; Hear it).
  void Iterate(std::uint64_t it) const { Say("i " + std::to_string(it)); }
  std::string Hear() const {
    std::string line;
    char c;
    while (read(answers, &c, 1) == 1 && c != '\n') line.push_back(c);
    return line;
  }
  void Kill() {
    if (pid > 0) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
      pid = -1;
    }
    close(commands);
    close(answers);
  }
};

}  // namespace phub::testing
