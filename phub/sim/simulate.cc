#include "phub/sim/simulate.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/sim/bottleneck.h"
#include "phub/sim/platform.h"
#include "phub/sim/ps_actors.h"
#include "phub/sim/rack_ps_actors.h"
#include "phub/sim/ring_actors.h"
#include "phub/sim/tree_actors.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {

const char* SchemeName(Scheme scheme) {
  switch (scheme) {
    case Scheme::kPs: return "ps";
    case Scheme::kPsRacks: return "ps-racks";
    case Scheme::kRing: return "ring";
    case Scheme::kTree: return "tree";
  }
  return "?";
}

// Every progress_seconds of wall time while the engine runs, a line on stderr: the simulated
// clock and the iterations the first worker group has finished (the clock's advances are
// SimGrid's events, so the check costs a clock read an event).
void ShowProgress(const Scenario& s, const IterationLog& log) {
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  auto next = std::make_shared<Clock::time_point>(
      start + std::chrono::milliseconds(static_cast<long>(s.progress_seconds * 1000)));
  sg4::Engine::on_time_advance_cb([&s, &log, start, next](double) {
    const Clock::time_point now = Clock::now();
    if (now < *next) return;
    *next = now + std::chrono::milliseconds(static_cast<long>(s.progress_seconds * 1000));
    std::size_t done = 0, of = 0;
    if (!log.ends.empty()) {
      for (double end : log.ends[0]) done += end > 0;
      of = log.ends[0].size();
    }
    std::fprintf(stderr, "phub-sim: %s, %u workers: %zu of %zu iterations, %.4f s simulated, "
                 "%.0f s of wall time\n", SchemeName(s.scheme), s.workers, done, of,
                 sg4::Engine::get_clock(),
                 std::chrono::duration<double>(now - start).count());
  });
}

// In the child: one engine, one scenario.
Prediction RunInEngine(const Scenario& s) {
  std::vector<std::string> args = {"phub-sim", "--log=root.thresh:critical",
                                   "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0",
                                   // Thousands of actors, each shallow: small stacks, no
                                   // guard page (each one a memory mapping of its own, and
                                   // Linux allows a process 65,536 of them).
                                   "--cfg=contexts/stack-size:64", "--cfg=contexts/guard-size:0"};
#if defined(__SANITIZE_ADDRESS__)
  // ASan cannot follow SimGrid's own stack switching (google/sanitizers#189): one thread an
  // actor instead, slower and equivalent.
  args.push_back("--cfg=contexts/factory:thread");
#endif
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  int argc = static_cast<int>(argv.size());
  sg4::Engine engine(&argc, argv.data());
  const Platform platform = BuildPlatform(s);
  IterationLog log;
  if (s.progress_seconds > 0) ShowProgress(s, log);
  switch (s.scheme) {
    case Scheme::kPs: StartPsActors(s, platform, log); break;
    case Scheme::kPsRacks: StartRackPsActors(s, platform, log); break;
    case Scheme::kRing: StartRingActors(s, platform, log); break;
    case Scheme::kTree: StartTreeActors(s, platform, log); break;
  }
  engine.run();
  Prediction p;
  const std::size_t jobs = JobsOf(s).size();
  if (jobs == 1) {
    std::vector<double> timed;
    p.first_iteration_seconds = log.Duration(0);
    for (std::uint32_t i = 1; i < s.iterations; ++i) timed.push_back(log.Duration(i));
    p.seconds_per_iteration =
        timed.empty() ? p.first_iteration_seconds : IterationLog::Median(timed);
    p.job_seconds_per_iteration = {p.seconds_per_iteration};
  } else {
    for (std::size_t j = 0; j < jobs; ++j) {
      p.first_iteration_seconds =
          std::max(p.first_iteration_seconds, log.Duration(0, static_cast<int>(j)));
    }
    p.job_seconds_per_iteration = log.SharedSecondsPerIteration(static_cast<std::uint32_t>(jobs));
    p.seconds_per_iteration =
        *std::max_element(p.job_seconds_per_iteration.begin(), p.job_seconds_per_iteration.end());
  }
  p.compute_seconds = s.forward_seconds;
  for (const Tensor& t : s.tensors) p.compute_seconds += t.backward_seconds;
  FindBottleneck(s, p);
  return p;
}

}  // namespace

StatusOr<Prediction> Simulate(const Scenario& scenario, double timeout_s) {
  PHUB_RETURN_IF_ERROR(Check(scenario));
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("Simulate: pipe() failed");
  std::fflush(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("Simulate: fork() failed");
  if (pid == 0) {
    close(fds[0]);
    const Prediction p = RunInEngine(scenario);
    std::string text = absl::StrCat(p.seconds_per_iteration, " ", p.first_iteration_seconds, " ",
                                    p.bytes_per_worker, " ", p.bottleneck_busy, " ",
                                    p.compute_seconds, " ", p.job_seconds_per_iteration.size());
    for (double seconds : p.job_seconds_per_iteration) absl::StrAppend(&text, " ", seconds);
    absl::StrAppend(&text, " ", p.bottleneck, "\n");
    ssize_t ignored = write(fds[1], text.data(), text.size());
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(timeout_s * 1000));
  bool timed_out = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    if (poll(&pfd, 1, static_cast<int>(std::min<long long>(left, 1000))) <= 0) continue;
    char buffer[512];
    const ssize_t n = read(fds[0], buffer, sizeof(buffer));
    if (n <= 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  close(fds[0]);
  if (timed_out) kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (timed_out) {
    return absl::DeadlineExceededError(
        absl::StrCat("the simulation ran past ", timeout_s, " s: fewer worker hosts or chunks "
                     "(Scenario::max_worker_hosts, max_chunks) make it faster"));
  }
  Prediction p;
  std::istringstream in(text);
  std::size_t jobs = 0;
  in >> p.seconds_per_iteration >> p.first_iteration_seconds >> p.bytes_per_worker >>
      p.bottleneck_busy >> p.compute_seconds >> jobs;
  for (std::size_t j = 0; j < jobs && j < 64 && in; ++j) {
    in >> p.job_seconds_per_iteration.emplace_back();
  }
  std::getline(in >> std::ws, p.bottleneck);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || in.fail() || p.bottleneck.empty()) {
    return absl::InternalError(absl::StrCat("the simulation failed (exit status ", status,
                                            "); its output: '", text, "'"));
  }
  return p;
}

}  // namespace phub::sim
