#include "phub/sim/simulate.h"

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/sim/chunks.h"
#include "phub/sim/platform.h"
#include "phub/sim/ps_actors.h"
#include "phub/sim/rack_ps_actors.h"
#include "phub/sim/ring_actors.h"
#include "phub/sim/tree_actors.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The busiest resource at `seconds` an iteration, from the bytes and CPU one iteration needs.
void FindBottleneck(const Scenario& s, Prediction& p) {
  double total = 0;
  for (const Tensor& t : s.tensors) total += static_cast<double>(t.bytes);
  const double t = p.seconds_per_iteration;
  std::vector<std::pair<std::string, double>> busy;
  const double n = static_cast<double>(s.workers / s.racks), racks = s.racks;
  const double uplink = UplinkBytesPerSecond(s);
  const double cores = std::max<std::uint32_t>(1, s.ps_cores);
  // Bytes each resource carries an iteration (each way), over its rate and the time.
  if (s.scheme == Scheme::kPs) {
    const double k = s.ps_hosts;
    p.bytes_per_worker = total;
    busy.emplace_back(k > 1 ? "a PS host's link" : "the PBox's link",
                      s.workers * total / k / PboxBytesPerSecond(s) / t);
    busy.emplace_back("a worker's link", total / WorkerBytesPerSecond(s) / t);
    busy.emplace_back(k > 1 ? "a PS host's cores" : "the PBox's cores",
                      s.workers * total * CoreSecondsPerByteIn(s) / k / cores / t);
    if (s.racks > 1) {  // rack 0's PBox takes every other rack's; K = racks: each 1 / K
      // each way: pushes out to (and weights in from) the other racks' PBoxes, weights out to
      // (pushes in from) the other racks' workers
      const double crossing = k > 1 ? 2 * n * total * (racks - 1) / racks : (racks - 1) * n * total;
      busy.emplace_back("a rack's uplink", crossing / uplink / t);
    }
  } else if (s.scheme == Scheme::kPsRacks) {
    p.bytes_per_worker = total;
    const double crossing = 2 * (racks - 1) / racks * total;  // sums out, others' sums in
    busy.emplace_back("a rack's PBox's link", (n * total + crossing) / PboxBytesPerSecond(s) / t);
    busy.emplace_back("a worker's link", total / WorkerBytesPerSecond(s) / t);
    busy.emplace_back("a rack's uplink", crossing / uplink / t);
    busy.emplace_back("a rack's PBox's cores", (n + 1) * total * CoreSecondsPerByteIn(s) / cores / t);
  } else if (s.scheme == Scheme::kTree) {
    p.bytes_per_worker = TreeBytesPerWorker(s);  // the busiest rank's, 2 S from N = 4 on
    busy.emplace_back("a worker's link", p.bytes_per_worker / WorkerBytesPerSecond(s) / t);
  } else {
    p.bytes_per_worker = 2.0 * (s.workers - 1) / s.workers * total;
    busy.emplace_back("a worker's link", p.bytes_per_worker / WorkerBytesPerSecond(s) / t);
    if (s.racks > 1) busy.emplace_back("a rack's uplink", p.bytes_per_worker / uplink / t);
  }
  const auto top = std::max_element(busy.begin(), busy.end(),
                                    [](const auto& a, const auto& b) { return a.second < b.second; });
  p.bottleneck = top->first;
  p.bottleneck_busy = top->second;
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
  switch (s.scheme) {
    case Scheme::kPs: StartPsActors(s, platform, log); break;
    case Scheme::kPsRacks: StartRackPsActors(s, platform, log); break;
    case Scheme::kRing: StartRingActors(s, platform, log); break;
    case Scheme::kTree: StartTreeActors(s, platform, log); break;
  }
  engine.run();
  Prediction p;
  std::vector<double> timed;
  p.first_iteration_seconds = log.Duration(0);
  for (std::uint32_t i = 1; i < s.iterations; ++i) timed.push_back(log.Duration(i));
  p.seconds_per_iteration = timed.empty() ? p.first_iteration_seconds : Median(timed);
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
    const std::string text = absl::StrCat(p.seconds_per_iteration, " ", p.first_iteration_seconds,
                                          " ", p.bytes_per_worker, " ", p.bottleneck_busy, " ",
                                          p.bottleneck, "\n");
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
  in >> p.seconds_per_iteration >> p.first_iteration_seconds >> p.bytes_per_worker >>
      p.bottleneck_busy;
  std::getline(in >> std::ws, p.bottleneck);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || in.fail() || p.bottleneck.empty()) {
    return absl::InternalError(absl::StrCat("the simulation failed (exit status ", status,
                                            "); its output: '", text, "'"));
  }
  return p;
}

}  // namespace phub::sim
