// A PsClient serving its connections to phubd's cores on several threads
// (PsClientOptions::io_threads; docs/design.md "A worker's I/O threads"): it leaves the job
// cleanly (every core hears its BYE, phubd its Goodbye), and a phubd killed under it fails
// every later call at once, on whichever thread the loss is seen. Training with it against a
// float64 reference: step_values_test.cc (StepValuesIoThreadsTest), where the pushes also
// overtake the iteration's values.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <iterator>
#include <thread>

#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/integration/process.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::uint64_t> kSizes = {3000, 17, 700};

std::vector<InProcessWorker> Started(const RunningPhubd& phubd, int io_threads) {
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 5000;
  options.io_threads = io_threads;
  auto workers = ConnectWorkers(options, 2, {0, 1}, TestTensors(kSizes));
  std::vector<std::thread> inits;
  for (auto& w : workers) {
    if (w.status.ok()) inits.emplace_back([&w] { w.status = w.client->Init(); });
  }
  for (auto& t : inits) t.join();
  return workers;
}

// Both workers run `iterations` more iterations from `first`, on their own threads.
std::vector<Status> Train(std::vector<InProcessWorker>& workers, std::uint64_t first,
                          std::uint64_t iterations) {
  std::vector<Status> results(workers.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < workers.size(); ++k) {
    threads.emplace_back([&, k] {
      for (std::uint64_t it = first; it < first + iterations && results[k].ok(); ++it) {
        results[k] = RunIteration(workers[k], it);
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

std::size_t ThreadsOfThisProcess() {
  return static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator("/proc/self/task"),
                                                std::filesystem::directory_iterator()));
}

TEST(IoThreadsTest, WorkersWithThreeThreadsLeaveTheJobCleanly) {
  TempDir dir;
  // 12 chunks on 3 cores: each of a worker's threads serves one core's connection.
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "3", "--chunk-bytes", "1024"});
  const std::size_t before = ThreadsOfThisProcess();
  auto workers = Started(phubd, 3);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  EXPECT_GE(ThreadsOfThisProcess(), before + 2 * 3) << "each worker: three event loops";
  for (const Status& s : Train(workers, 1, 4)) ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(workers[0].weights, workers[1].weights);
  for (auto& w : workers) EXPECT_TRUE(w.client->Close().ok());
  // Close returns once the Goodbye is out; phubd logs it when it has read it.
  const std::string log =
      AwaitLog(phubd.log_path, {"rank 0 says goodbye after 4 iterations",
                                "rank 1 says goodbye after 4 iterations"});
  EXPECT_THAT(log, HasSubstr("rank 0 says goodbye after 4 iterations"));
  EXPECT_THAT(log, HasSubstr("rank 1 says goodbye after 4 iterations"));
  EXPECT_TRUE(phubd.process.Running());
}

TEST(IoThreadsTest, APhubdKilledFailsEveryLaterCallOfAClientWithSeveralThreads) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "3", "--chunk-bytes", "1024"});
  // More threads than phubd has cores: one per core is all there is to serve.
  auto workers = Started(phubd, 8);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  for (const Status& s : Train(workers, 1, 2)) ASSERT_TRUE(s.ok()) << s;
  phubd.process.Kill(SIGKILL);
  for (const Status& s : Train(workers, 3, 1)) {
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("lost the data connection to phubd"));
  }
  for (auto& w : workers) {
    EXPECT_FALSE(w.client->Push(0, w.grads[0]).ok());
    EXPECT_TRUE(w.client->Close().ok());  // nothing to say goodbye to; returns at once
  }
}

TEST(IoThreadsTest, AWorkerThatAbandonsTheJobIsLostNotDone) {
  TempDir dir;
  RunningPhubd phubd =
      StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "1024", "--rejoin-timeout-ms", "0"});
  auto workers = Started(phubd, 2);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  for (const Status& s : Train(workers, 1, 1)) ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(workers[1].client->Abandon().ok());
  // Rank 1 was lost, not done: rank 0's next iteration finds the job stalled, naming it.
  const Status s = RunIteration(workers[0], 2);
  EXPECT_EQ(s.code(), absl::StatusCode::kAborted) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("rank 1"));
  EXPECT_THAT(ReadFile(phubd.log_path), ::testing::Not(HasSubstr("rank 1 says goodbye")));
}

}  // namespace
}  // namespace phub::testing
