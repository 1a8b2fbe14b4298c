// Recovery on each transport: one job of real processes in which workers are SIGKILLed and
// rejoin, and phubd is SIGKILLed and resumes from its checkpoint, before and after each other,
// ends BITWISE where an uninterrupted run does. On TCP and shm everywhere; on verbs where there is an
// RDMA device (tests/verbs/run_verbs_tests.sh runs it in the soft-RoCE guest). On verbs a
// rejoiner's pushes land in zones phubd publishes from the iteration after its resume point,
// and its weights arrive in zones from the iteration phubd resumes it at: this is where that
// bookkeeping would show. The many-kill runs on TCP are recovery_test.cc's.
#include <gtest/gtest.h>

#include <csignal>
#include <string>
#include <vector>

#include "phub/transport/verbs/verbs_device.h"
#include "tests/integration/recovery_fixture.h"

namespace phub::testing::recovery {
namespace {

class RecoveryOnTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(RecoveryOnTransport, WorkersRejoinAndPhubdResumesBitwise) {
  const std::string transport = GetParam();
  if (transport == "verbs" && transport::verbs::ListDevices().empty()) {
    GTEST_SKIP() << "no RDMA device here: tests/verbs/run_verbs_tests.sh runs this in a QEMU "
                    "guest with soft-RoCE";
  }
  constexpr std::uint32_t kWorld = 3;
  constexpr std::uint64_t kIterations = 80;
  TempDir dir;
  // The reference runs on TCP: the same bits whatever carries them.
  const std::string reference = ReferenceWeights(dir, kWorld, kIterations);
  ASSERT_FALSE(reference.empty());

  const auto [checkpoints, flags, resume_flags] = CheckpointingFlags(
      dir, kWorld, {"--transport", transport, "--rejoin-timeout-ms", "30000"});
  const std::uint16_t port = phub::testing::FreeLoopbackPort();  // phubd restarts on it
  Phubd phubd = LaunchPhubd(dir, "phubd", port, flags);
  Job job(dir, "job", kWorld, kIterations);
  job.extra = {"--step-delay-ms", "10", "--reconnect-ms", "30000"};
  job.StartAll(port);
  ASSERT_TRUE(WaitFor([&] { return job.AllProgressed(3); }, milliseconds(60000)))
      << "the job did not start; phubd's log:\n"
      << phubd.Log();

  // A worker killed and restarted: it rejoins the running job.
  auto kill_and_rejoin = [&](std::uint32_t victim) {
    job.workers[victim].Kill(SIGKILL);
    ASSERT_EQ(job.workers[victim].Wait(milliseconds(10000)), 128 + SIGKILL);
    job.ForgetProgress(victim);
    const auto killed = Clock::now();
    job.Restart(victim, port);
    ASSERT_TRUE(WaitFor([&] { return job.Progress(victim) > 0; }, milliseconds(40000)))
        << "rank " << victim << " did not rejoin; phubd's log:\n"
        << phubd.Log() << "\nits log:\n"
        << job.Log(victim);
    std::printf("%s: rank %u back and through an iteration in %.0f ms\n", transport.c_str(),
                victim, MsSince(killed));
  };
  kill_and_rejoin(1);

  // phubd killed once a checkpoint is written, and restarted with --resume.
  ASSERT_TRUE(WaitFor([&] { return phubd.Log().find(" written to ") != std::string::npos; },
                      milliseconds(40000)))
      << phubd.Log();
  phubd.process.Kill(SIGKILL);
  ASSERT_EQ(phubd.process.Wait(milliseconds(10000)), 128 + SIGKILL);
  const auto killed = Clock::now();
  phubd = LaunchPhubd(dir, "phubd", port, resume_flags);
  for (std::uint32_t r = 0; r < kWorld; ++r) job.ForgetProgress(r);
  ASSERT_TRUE(WaitFor([&] { return job.AllProgressed(1); }, milliseconds(60000)))
      << "the job did not go on after phubd's restart; phubd's log:\n"
      << phubd.Log();
  std::printf("%s: the job was back and through an iteration in %.0f ms after phubd's kill\n",
              transport.c_str(), MsSince(killed));

  // A worker killed in the resumed job rejoins it too.
  kill_and_rejoin(2);

  const std::string failures = job.WaitAllSucceed(milliseconds(120000));
  ASSERT_EQ(failures, "") << "phubd's log:\n" << phubd.Log();
  ExpectWeightsEqual(job, reference);
  const std::string log = phubd.Log();
  EXPECT_NE(log.find("resuming from "), std::string::npos) << log;
  EXPECT_EQ(CountOf(log, " rejoined from "), 2u) << log;
  EXPECT_EQ(CountOf(log, "stalled"), 0u) << log;
}

INSTANTIATE_TEST_SUITE_P(Transports, RecoveryOnTransport, ::testing::Values("tcp", "verbs", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace phub::testing::recovery
