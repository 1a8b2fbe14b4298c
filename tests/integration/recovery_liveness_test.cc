// Liveness, with real processes on TCP: a stopped (SIGSTOP) worker, a stopped phubd and a cut
// link (network namespaces; root only) are each detected within the liveness timeout, and what
// follows (the job waits for a rejoin, then stalls; or the worker comes back and the job ends
// BITWISE where an uninterrupted run does) happens within bounds. Kills: recovery_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/recovery_fixture.h"

namespace phub::testing::recovery {
namespace {

using ::testing::HasSubstr;

// ---- Stopped workers ----

TEST(Recovery, StoppedWorkerDetectedWithinBound) {
  constexpr int kLivenessMs = 1000, kRejoinMs = 3000;
  TempDir dir;
  Phubd phubd = LaunchPhubd(dir, "phubd", 0,
                            Flags(3, {"--liveness-timeout-ms", std::to_string(kLivenessMs),
                                      "--rejoin-timeout-ms", std::to_string(kRejoinMs)}));
  Job job(dir, "stopped", 3, 100000);
  job.extra = {"--step-delay-ms", "10"};
  job.StartAll(phubd.port);
  ASSERT_TRUE(WaitFor([&] { return job.AllProgressed(3); }, milliseconds(30000))) << phubd.Log();

  job.workers[2].Kill(SIGSTOP);
  const auto stopped = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return phubd.Log().find("nothing heard for") != std::string::npos; },
                      milliseconds(kLivenessMs + 5000)))
      << phubd.Log();
  Record("phubd_detects_ms", MsSince(stopped));
  EXPECT_THAT(phubd.Log(), HasSubstr("rank 2 ("));
  // The next line of phubd's log, which the test may read before it is written (seen in TSan).
  EXPECT_TRUE(WaitFor(
      [&] {
        return phubd.Log().find("for a worker of rank 2 to say Hello again") != std::string::npos;
      },
      milliseconds(5000)))
      << phubd.Log();

  // The survivors are told, wait out the rejoin timeout, then fail: Aborted, exit 3.
  for (std::uint32_t r = 0; r < 2; ++r) {
    const auto left = milliseconds(kLivenessMs + kRejoinMs + 5000) -
                      std::chrono::duration_cast<milliseconds>(Clock::now() - stopped);
    EXPECT_EQ(job.workers[r].Wait(std::max(left, milliseconds(0))), 3)
        << "survivor " << r << "; its log:\n"
        << job.Log(r);
    const std::string log = job.Log(r);
    EXPECT_THAT(log, HasSubstr("rank 2 was lost"));
    EXPECT_THAT(log, HasSubstr("stalled"));
    EXPECT_THAT(log, HasSubstr("(ABORTED)"));
  }
  Record("survivors_exit_ms", MsSince(stopped));
  EXPECT_THAT(phubd.Log(), HasSubstr("did not rejoin"));

  // Continued, the stopped worker finds its connections closed (no --reconnect-ms: exit 3).
  job.workers[2].Kill(SIGCONT);
  const auto continued = Clock::now();
  EXPECT_EQ(job.workers[2].Wait(milliseconds(15000)), 3) << job.Log(2);
  Record("continued_exit_ms", MsSince(continued));
  EXPECT_TRUE(phubd.process.Running());
}

// A phubd with `liveness_ms` and a 10 s rejoin window, and `job` started through it, its
// workers reconnecting for up to 30 s: a job that recovers from a stopped process.
Phubd StartWithRejoinWindow(const TempDir& dir, Job& job, int liveness_ms) {
  Phubd phubd = LaunchPhubd(dir, "phubd", 0,
                            Flags(job.world, {"--liveness-timeout-ms", std::to_string(liveness_ms),
                                              "--rejoin-timeout-ms", "10000"}));
  job.extra = {"--step-delay-ms", "10", "--reconnect-ms", "30000"};
  job.StartAll(phubd.port);
  return phubd;
}

TEST(Recovery, StoppedWorkerContinuedRejoins) {
  constexpr int kLivenessMs = 1000;
  constexpr std::uint64_t kIterations = 60;
  TempDir dir;
  const std::string reference = ReferenceWeights(dir, 3, kIterations);
  ASSERT_FALSE(reference.empty());
  Job job(dir, "continued", 3, kIterations);
  Phubd phubd = StartWithRejoinWindow(dir, job, kLivenessMs);
  ASSERT_TRUE(WaitFor([&] { return job.AllProgressed(5); }, milliseconds(30000))) << phubd.Log();

  job.workers[1].Kill(SIGSTOP);
  const auto stopped = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return phubd.Log().find("nothing heard for") != std::string::npos; },
                      milliseconds(kLivenessMs + 5000)))
      << phubd.Log();
  Record("phubd_detects_ms", MsSince(stopped));
  std::this_thread::sleep_until(stopped + milliseconds(2000));
  job.workers[1].Kill(SIGCONT);
  const auto continued = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return phubd.Log().find(" rejoined from ") != std::string::npos; },
                      milliseconds(20000)))
      << phubd.Log() << "\nits log:\n"
      << job.Log(1);
  Record("rejoined_after_continue_ms", MsSince(continued));
  const std::string failures = job.WaitAllSucceed(milliseconds(60000));
  ASSERT_EQ(failures, "") << "phubd's log:\n" << phubd.Log();
  ExpectWeightsEqual(job, reference);
  EXPECT_THAT(job.Log(1), HasSubstr("reconnected;"));
  EXPECT_EQ(CountOf(phubd.Log(), " rejoined from "), 1u) << phubd.Log();
  EXPECT_EQ(CountOf(phubd.Log(), "stalled"), 0u) << phubd.Log();
}

// ---- A stopped phubd ----

TEST(Recovery, PhubdStoppedIsDetectedByWorkers) {
  constexpr int kLivenessMs = 1000;
  TempDir dir;
  Phubd phubd = LaunchPhubd(dir, "phubd", 0,
                            Flags(2, {"--liveness-timeout-ms", std::to_string(kLivenessMs)}));
  Job job(dir, "phubd-stopped", 2, 100000);
  job.extra = {"--step-delay-ms", "10"};
  job.StartAll(phubd.port);
  ASSERT_TRUE(WaitFor([&] { return job.AllProgressed(3); }, milliseconds(30000))) << phubd.Log();

  phubd.process.Kill(SIGSTOP);
  const auto stopped = Clock::now();
  for (std::uint32_t r = 0; r < 2; ++r) {
    const auto left = milliseconds(kLivenessMs + 6000) -
                      std::chrono::duration_cast<milliseconds>(Clock::now() - stopped);
    EXPECT_EQ(job.workers[r].Wait(std::max(left, milliseconds(0))), 3) << job.Log(r);
    EXPECT_THAT(job.Log(r), HasSubstr("nothing heard from phubd")) << job.Log(r);
    EXPECT_THAT(job.Log(r), HasSubstr("(UNAVAILABLE)")) << job.Log(r);
  }
  Record("workers_exit_ms", MsSince(stopped));
  const std::size_t log_before = phubd.Log().size();
  phubd.process.Kill(SIGCONT);
  // Continued, phubd finds the job's workers gone (it logs them) and keeps running.
  EXPECT_TRUE(WaitFor([&] { return phubd.Log().size() > log_before; }, milliseconds(10000)))
      << phubd.Log();
  EXPECT_TRUE(phubd.process.Running()) << phubd.Log();
  std::printf("phubd after SIGCONT:\n%s\n", phubd.Log().substr(log_before).c_str());
}

// A phubd stopped before its workers come (or while they reconnect): the kernel still accepts
// their connections and takes their Hellos, and nothing answers. Before the fix the wait for
// the Welcome had no deadline: phub-worker hung for good. Now phubd answers a Hello at once and
// heartbeats while the job forms, and a silent one fails the connect within
// --hello-answer-timeout-ms, naming phubd's address and what to check.

// phub-worker, rank `rank` of `world`, a long fashion-cnn run on synthetic data against `port`.
Process StartPhubWorker(const TempDir& dir, const std::string& name, std::uint16_t port,
                        std::uint32_t rank, std::uint32_t world,
                        const std::vector<std::string>& more) {
  std::vector<std::string> argv = {PhubWorkerPath(), "--comm", "ps", "--ps",
                                   "127.0.0.1:" + std::to_string(port), "--rank",
                                   std::to_string(rank), "--world", std::to_string(world),
                                   "--model", "fashion-cnn", "--batch", "2", "--warmup", "0"};
  argv.insert(argv.end(), more.begin(), more.end());
  return Process::Start(argv, dir.File(name + ".log"));
}

TEST(Recovery, FirstConnectToAStoppedPhubdFailsWithinTheAnswerTimeout) {
  constexpr int kAnswerMs = 2000;
  TempDir dir;
  Phubd phubd = LaunchPhubd(dir, "phubd", 0, Flags(1));
  phubd.process.Kill(SIGSTOP);
  const auto start = Clock::now();
  Process worker = StartPhubWorker(dir, "worker", phubd.port, 0, 1,
                                   {"--iters", "5", "--hello-answer-timeout-ms",
                                    std::to_string(kAnswerMs)});
  // Its start (a model to build) plus the bound, with generous slack for a loaded machine.
  const std::optional<int> code = worker.Wait(milliseconds(kAnswerMs + 20000));
  const double waited_ms = MsSince(start);
  phubd.process.Kill(SIGCONT);
  if (!code) worker.Kill(SIGKILL);
  const std::string log = ReadFile(dir.File("worker.log"));
  ASSERT_TRUE(code.has_value()) << "phub-worker still waits for a stopped phubd after "
                                << waited_ms << " ms:\n" << log;
  EXPECT_NE(*code, 0) << log;
  EXPECT_GE(waited_ms, kAnswerMs) << log;
  Record("worker_gave_up_ms", waited_ms);
  EXPECT_THAT(log, HasSubstr("nothing heard from phubd at 127.0.0.1:" +
                             std::to_string(phubd.port) + " for 2000 ms"));
  EXPECT_THAT(log, HasSubstr("--hello-answer-timeout-ms"));
  EXPECT_THAT(log, HasSubstr("is phubd stopped (SIGSTOP), hung or overloaded?"));
  EXPECT_TRUE(phubd.process.Running()) << phubd.Log();
}

// The other side of the bound: a job that takes longer than it to form (phubd waits for its
// second worker) still forms, because phubd heartbeats its forming members.
TEST(Recovery, AJobFormingLongerThanTheAnswerTimeoutStillForms) {
  // (The default bound is 10 s. phubd heartbeats through the install too since it left the
  // control plane's thread: AnInstallLongerThanTheAnswerTimeoutStillStarts.)
  constexpr int kAnswerMs = 4000;
  TempDir dir;
  Phubd phubd = LaunchPhubd(dir, "phubd", 0, Flags(2));
  const std::vector<std::string> more = {"--iters", "3", "--hello-answer-timeout-ms",
                                         std::to_string(kAnswerMs), "--log-level", "debug"};
  std::vector<Process> workers;
  workers.push_back(StartPhubWorker(dir, "w0", phubd.port, 0, 2, more));
  ASSERT_TRUE(WaitFor([&] { return phubd.Log().find("rank 0 joined") != std::string::npos; },
                      milliseconds(20000)))
      << phubd.Log();
  // The job forms for longer than the bound meanwhile.
  std::this_thread::sleep_for(milliseconds(kAnswerMs + 1000));
  workers.push_back(StartPhubWorker(dir, "w1", phubd.port, 1, 2, more));
  for (std::uint32_t r = 0; r < 2; ++r) {
    const std::optional<int> code = workers[r].Wait(milliseconds(60000));
    const std::string log = ReadFile(dir.File("w" + std::to_string(r) + ".log"));
    ASSERT_TRUE(code.has_value()) << log;
    EXPECT_EQ(*code, 0) << log << "\nphubd:\n" << phubd.Log();
  }
}

// A job's install (every chunk's memory allocated and touched on its core: seconds for a large
// model) runs off the control plane's thread, so the forming workers keep getting Heartbeats:
// here each core's install takes 3 s (--test-install-delay-ms, as a ~2 GB model did on the CI
// VM) and the workers give up on a silent phubd after 1.5 s. Before, the install blocked the
// control plane and the workers left ("nothing heard from phubd").
TEST(Recovery, AnInstallLongerThanTheAnswerTimeoutStillStarts) {
  constexpr int kAnswerMs = 1500, kInstallMs = 3000;
  TempDir dir;
  Phubd phubd = LaunchPhubd(dir, "phubd", 0,
                            Flags(2, {"--test-install-delay-ms", std::to_string(kInstallMs),
                                      "--log-level", "debug"}));
  const std::vector<std::string> more = {"--iters", "3", "--hello-answer-timeout-ms",
                                         std::to_string(kAnswerMs), "--log-level", "debug"};
  std::vector<Process> workers;
  for (std::uint32_t r = 0; r < 2; ++r) {
    workers.push_back(StartPhubWorker(dir, "w" + std::to_string(r), phubd.port, r, 2, more));
  }
  for (std::uint32_t r = 0; r < 2; ++r) {
    const std::optional<int> code = workers[r].Wait(milliseconds(60000));
    const std::string log = ReadFile(dir.File("w" + std::to_string(r) + ".log"));
    ASSERT_TRUE(code.has_value()) << log;
    EXPECT_EQ(*code, 0) << log << "\nphubd:\n" << phubd.Log();
  }
  EXPECT_THAT(phubd.Log(), HasSubstr("its shards are installed on 2 cores in"));
}

// While one job installs, phubd serves the others: a running job's workers, which take phubd
// for gone after 1 s without a Heartbeat (--liveness-timeout-ms), go on through a second job's
// 3 s install and finish.
TEST(Recovery, ARunningJobIsServedWhileAnotherInstalls) {
  constexpr int kLivenessMs = 1000, kInstallMs = 3000;
  TempDir dir;
  Phubd phubd = LaunchPhubd(dir, "phubd", 0,
                            Flags(2, {"--liveness-timeout-ms", std::to_string(kLivenessMs),
                                      "--test-install-delay-ms", std::to_string(kInstallMs)}));
  Job running(dir, "running", 2, 1000000);
  running.extra = {"--job", "running", "--step-delay-ms", "10"};
  running.StartAll(phubd.port);
  ASSERT_TRUE(WaitFor([&] { return running.AllProgressed(3); }, milliseconds(30000)))
      << phubd.Log();
  Job late(dir, "late", 2, 3);
  late.extra = {"--job", "late"};
  late.StartAll(phubd.port);
  ASSERT_TRUE(WaitFor([&] { return phubd.Log().find("job 'late' started") != std::string::npos; },
                      milliseconds(30000)))
      << phubd.Log();
  EXPECT_EQ(late.WaitAllSucceed(milliseconds(30000)), "") << phubd.Log();
  // The running job went on all along: no worker lost phubd, and it still steps.
  const std::uint64_t now = running.MaxProgress();
  EXPECT_TRUE(WaitFor([&] { return running.AllProgressed(now + 3); }, milliseconds(10000)))
      << phubd.Log();
  for (std::uint32_t r = 0; r < 2; ++r) {
    EXPECT_THAT(running.Log(r), ::testing::Not(HasSubstr("nothing heard from phubd")));
    running.workers[r].Kill(SIGTERM);
  }
  EXPECT_THAT(phubd.Log(), ::testing::Not(HasSubstr("job 'running' stalled")));
}

// A phubd whose every install of a job takes 2 s, with `job` started on it.
Phubd InstallingSlowly(const TempDir& dir, Job& job) {
  Phubd phubd = LaunchPhubd(dir, "phubd", 0, Flags(2, {"--test-install-delay-ms", "2000"}));
  job.StartAll(phubd.port);
  return phubd;
}

// The job has formed: its install has begun.
bool Formed(const Phubd& phubd) {
  return WaitFor([&] { return phubd.Log().find("formed:") != std::string::npos; },
                 milliseconds(30000));
}

// A worker that leaves while its job installs: the start fails once the install is in, every
// other member is told which rank left (JOB_STALLED: not a rejoin), nothing stays installed,
// and the job's name starts again.
TEST(Recovery, AWorkerLeavingWhileItsJobInstallsFailsTheStartNamingIt) {
  TempDir dir;
  Job job(dir, "left", 2, 3);
  Phubd phubd = InstallingSlowly(dir, job);
  ASSERT_TRUE(Formed(phubd)) << phubd.Log();
  job.workers[1].Kill(SIGKILL);
  const std::optional<int> code = job.workers[0].Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value()) << job.Log(0);
  EXPECT_NE(*code, 0) << job.Log(0);
  EXPECT_THAT(job.Log(0), HasSubstr("rank(s) 1 of job 'default' left while phubd installed it"));
  EXPECT_THAT(phubd.Log(), HasSubstr("cannot start"));
  // Its name and memory are free again: the same job runs.
  job.StartAll(phubd.port);
  EXPECT_EQ(job.WaitAllSucceed(milliseconds(60000)), "") << phubd.Log();
}

// phubd told to stop while a job installs: it waits for the install, removes it and exits
// cleanly (the sanitizer builds check it frees what the install allocated).
TEST(Recovery, PhubdStoppingWhileAJobInstallsExitsCleanly) {
  TempDir dir;
  Job job(dir, "stop", 2, 3);
  Phubd phubd = InstallingSlowly(dir, job);
  ASSERT_TRUE(Formed(phubd)) << phubd.Log();
  phubd.process.Kill(SIGTERM);
  const std::optional<int> code = phubd.process.Wait(milliseconds(30000));
  ASSERT_TRUE(code.has_value()) << phubd.Log();
  EXPECT_EQ(*code, 0) << phubd.Log();
  for (std::uint32_t r = 0; r < 2; ++r) {
    const std::optional<int> worker = job.workers[r].Wait(milliseconds(30000));
    ASSERT_TRUE(worker.has_value()) << job.Log(r);
    EXPECT_NE(*worker, 0) << job.Log(r);
  }
}

// --reconnect-timeout-ms is the reconnect's whole limit: each attempt's connect and wait for
// the Welcome get only what is left of it. Before the fix the wait for the Welcome of a stopped
// phubd had no deadline (and each attempt's connect took the whole timeout: 119.7 s for 60 s).
TEST(Recovery, ReconnectToAStoppedPhubdEndsWithinTheReconnectTimeout) {
  constexpr int kLivenessMs = 1000, kReconnectMs = 3000;
  TempDir dir;
  Phubd phubd =
      LaunchPhubd(dir, "phubd", 0, Flags(1, {"--liveness-timeout-ms", std::to_string(kLivenessMs)}));
  const std::string log_path = dir.File("worker.log");
  Process worker = StartPhubWorker(dir, "worker", phubd.port, 0, 1,
                                   {"--iters", "1000000", "--log-every", "1",
                                    "--reconnect-timeout-ms", std::to_string(kReconnectMs)});
  ASSERT_TRUE(WaitFor([&] { return ReadFile(log_path).find("step 2") != std::string::npos; },
                      milliseconds(30000)))
      << ReadFile(log_path) << "\nphubd:\n" << phubd.Log();
  phubd.process.Kill(SIGSTOP);
  // The worker notices within the liveness bound and starts reconnecting: the limit runs from
  // its "reconnecting" line (seen within the 10 ms poll).
  ASSERT_TRUE(WaitFor([&] { return ReadFile(log_path).find("reconnecting for up to") !=
                                   std::string::npos; },
                      milliseconds(kLivenessMs + 10000)))
      << ReadFile(log_path);
  const auto reconnecting = Clock::now();
  // A hang guard, not a measure: before issue 38 the worker never gave up on a stopped phubd.
  const std::optional<int> code = worker.Wait(milliseconds(kReconnectMs * 2 + 10000));
  const double took_ms = MsSince(reconnecting);
  phubd.process.Kill(SIGCONT);
  if (!code) worker.Kill(SIGKILL);
  const std::string log = ReadFile(log_path);
  ASSERT_TRUE(code.has_value()) << "still reconnecting " << took_ms << " ms later:\n" << log;
  EXPECT_NE(*code, 0) << log;
  Record("reconnect_gave_up_ms", took_ms);
  // It tried for its whole limit (it did not give up at the first refused attempt), and it
  // ended: the Wait above bounds that generously. How close the end comes to the setting is
  // measured, not asserted: bench/liveness/reconnect_limit.py (1.01-1.03x the setting).
  EXPECT_GE(took_ms, kReconnectMs * 0.9 - 100) << log;
  EXPECT_THAT(log, HasSubstr("phubd at 127.0.0.1:" + std::to_string(phubd.port)));
  EXPECT_THAT(log, HasSubstr("is phubd stopped (SIGSTOP), hung or overloaded?"));
  EXPECT_THAT(log, HasSubstr("--reconnect-timeout-ms"));
}

// phubd paused past the liveness timeout (a VM stall, SIGSTOP) and continued: the workers,
// which gave it up and reconnect, rejoin, and the final weights are the reference's. Found
// three bugs, fixed: a worker's new Hello before phubd noticed its old connections was refused
// ("a job ... is running"; now it replaces the old session and rejoins); a loss of the old data
// connection handled after the rejoin dropped the new session (now told apart by the rank's
// ForgetWorker epoch); and the giving-up client said BYE and Goodbye, so phubd took a rejoining
// worker for one that had left (a client that failed now closes without them); and a wedge in
// ~1 run of 5: a replayed copy judged "already counted" whose chunk completed while it arrived
// got no answer (the broadcast had skipped the held rejoiner); now it is answered.
TEST(Recovery, PhubdPausedPastLivenessWorkersRejoin) {
  constexpr int kLivenessMs = 1000;
  constexpr std::uint64_t kIterations = 150;
  TempDir dir;
  const std::string reference = ReferenceWeights(dir, 2, kIterations);
  ASSERT_FALSE(reference.empty());
  Job job(dir, "paused", 2, kIterations);
  Phubd phubd = StartWithRejoinWindow(dir, job, kLivenessMs);
  ASSERT_TRUE(WaitFor([&] { return job.AllProgressed(5); }, milliseconds(30000))) << phubd.Log();
  phubd.process.Kill(SIGSTOP);
  std::this_thread::sleep_for(milliseconds(2 * kLivenessMs));
  phubd.process.Kill(SIGCONT);
  const std::string failures = job.WaitAllSucceed(milliseconds(60000));
  ASSERT_EQ(failures, "") << "phubd's log:\n" << phubd.Log();
  ExpectWeightsEqual(job, reference);
}

// ---- A cut link (network namespaces; root only) ----

// A namespace with one veth pair to the root namespace: 10.231.N.1 here, 10.231.N.2 there.
// Not named phub-*: deploy/netns/rack.sh removes those.
class LinkedNamespace {
 public:
  LinkedNamespace() {
    const int id = static_cast<int>(getpid() % 250);
    name_ = "rtest" + std::to_string(getpid());
    here_ = "rt" + std::to_string(getpid()) + "a";
    there_ = "rt" + std::to_string(getpid()) + "b";
    host_ip_ = "10.231." + std::to_string(id) + ".1";
    peer_ip_ = "10.231." + std::to_string(id) + ".2";
    if (!Ip("netns add " + name_)) {
      error_ = "`ip netns add` failed (needs root or CAP_SYS_ADMIN)";
      return;
    }
    created_ = true;
    const bool ok =
        Ip("link add " + here_ + " type veth peer name " + there_) &&
        Ip("link set " + there_ + " netns " + name_) &&
        Ip("addr add " + host_ip_ + "/30 dev " + here_) && Ip("link set " + here_ + " up") &&
        Ip("-n " + name_ + " addr add " + peer_ip_ + "/30 dev " + there_) &&
        Ip("-n " + name_ + " link set " + there_ + " up") && Ip("-n " + name_ + " link set lo up");
    if (!ok) error_ = "could not set up the veth pair";
  }
  ~LinkedNamespace() {
    if (!created_) return;
    Ip("link del " + here_);
    Ip("netns del " + name_);
  }
  const std::string& error() const { return error_; }
  const std::string& host_ip() const { return host_ip_; }
  bool CutLink() { return Ip("link set " + here_ + " down"); }
  std::vector<std::string> Exec() const { return {IpPath(), "netns", "exec", name_}; }

  static std::string IpPath() {
    for (const char* path : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
      if (access(path, X_OK) == 0) return path;
    }
    return "ip";
  }

 private:
  static bool Ip(const std::string& args) {
    return std::system((IpPath() + " " + args + " >/dev/null 2>&1").c_str()) == 0;
  }
  std::string name_, here_, there_, host_ip_, peer_ip_, error_;
  bool created_ = false;
};

TEST(Recovery, CutLinkIsDetectedWithinLiveness) {
  constexpr int kLivenessMs = 1000, kRejoinMs = 2000;
  LinkedNamespace ns;
  if (!ns.error().empty()) GTEST_SKIP() << ns.error();
  TempDir dir;
  // On every address: rank 0 comes over loopback, rank 1 from the namespace over the veth
  // (another host: a token, or phubd would serve only its own machine).
  std::ofstream(dir.File("token")) << "cut-link-token\n";
  Phubd phubd = LaunchPhubd(dir, "phubd", 0,
                            Flags(2, {"--liveness-timeout-ms", std::to_string(kLivenessMs),
                                      "--rejoin-timeout-ms", std::to_string(kRejoinMs),
                                      "--token-file", dir.File("token")}),
                            "0.0.0.0");
  Job job(dir, "cut", 2, 100000);
  job.extra = {"--step-delay-ms", "10", "--token", "cut-link-token"};
  job.hosts = {"127.0.0.1", ns.host_ip()};
  job.workers.push_back(job.Start(0, phubd.port));
  job.prefix = ns.Exec();
  job.workers.push_back(job.Start(1, phubd.port));
  ASSERT_TRUE(WaitFor([&] { return job.AllProgressed(3); }, milliseconds(30000)))
      << phubd.Log() << "\n"
      << job.Log(1);

  ASSERT_TRUE(ns.CutLink());
  const auto cut = Clock::now();
  ASSERT_TRUE(WaitFor([&] { return phubd.Log().find("nothing heard for") != std::string::npos; },
                      milliseconds(kLivenessMs + 5000)))
      << phubd.Log();
  Record("phubd_detects_ms", MsSince(cut));
  EXPECT_THAT(phubd.Log(), HasSubstr("rank 1 ("));
  // The cut-off worker stops hearing phubd; the survivor is told, then the job stalls.
  EXPECT_EQ(job.workers[1].Wait(milliseconds(kLivenessMs + 6000)), 3) << job.Log(1);
  EXPECT_THAT(job.Log(1), HasSubstr("nothing heard from phubd"));
  EXPECT_EQ(job.workers[0].Wait(milliseconds(kLivenessMs + kRejoinMs + 6000)), 3) << job.Log(0);
  EXPECT_THAT(job.Log(0), HasSubstr("rank 1 was lost"));
  EXPECT_THAT(job.Log(0), HasSubstr("stalled"));
  Record("both_exit_ms", MsSince(cut));
  EXPECT_TRUE(phubd.process.Running());
}

// Protected by default (issue 38): a phubd without a token serves only its own machine's
// workers. A worker from another host (the namespace, over the veth) is refused with the fix;
// with --allow-remote-without-token it joins, and phubd's log warns that anyone may.
TEST(Authentication, WithoutATokenOnlyThisMachinesWorkersJoin) {
  LinkedNamespace ns;
  if (!ns.error().empty()) GTEST_SKIP() << ns.error();
  TempDir dir;
  for (const bool allow : {false, true}) {
    std::vector<std::string> flags = Flags(1, {});
    if (allow) flags.push_back("--allow-remote-without-token");
    Phubd phubd = LaunchPhubd(dir, allow ? "open" : "protected", 0, flags, "0.0.0.0");
    EXPECT_THAT(phubd.Log(), HasSubstr(allow ? "authentication: NONE"
                                             : "serves only workers on this machine"));
    Job job(dir, allow ? "remote-open" : "remote", 1, 1000);
    job.hosts = {ns.host_ip()};
    job.prefix = ns.Exec();
    job.workers.push_back(job.Start(0, phubd.port));
    const std::optional<int> code = job.workers[0].Wait(milliseconds(20000));
    if (allow) {
      EXPECT_EQ(code, 0) << job.Log(0);
    } else {
      EXPECT_NE(code, 0) << job.Log(0);
      EXPECT_THAT(job.Log(0), HasSubstr("serves only workers on its own machine"));
      EXPECT_THAT(job.Log(0), HasSubstr("--token-file"));
      EXPECT_THAT(phubd.Log(), HasSubstr("has no token and serves only this machine"));
    }
    // This machine's workers are served either way.
    Job local(dir, allow ? "local-open" : "local", 1, 1000);
    local.workers.push_back(local.Start(0, phubd.port));
    EXPECT_EQ(local.workers[0].Wait(milliseconds(20000)), 0) << local.Log(0);
  }
}

}  // namespace
}  // namespace phub::testing::recovery
