// Bad and dying clients: phubd drops only the offending connection, reports a stalled job when
// a worker dies, tells the survivors, and serves the next job.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <csignal>
#include <thread>

#include "phub/transport/socket_options.h"
#include "phub/transport/verbs/verbs_device.h"
#include "phub/transport/wire_header.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/support/free_port.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;

// Sends `bytes` to 127.0.0.1:port and reports whether the peer then closed the connection.
bool PeerClosesAfter(std::uint16_t port, const std::vector<std::byte>& bytes) {
  boost::asio::io_context context;
  auto socket = transport::ConnectWithRetry(context, "127.0.0.1", port, 5000);
  if (!socket.ok()) return false;
  boost::system::error_code ec;
  boost::asio::write(*socket, boost::asio::buffer(bytes), ec);
  char sink[64];
  boost::asio::read(*socket, boost::asio::buffer(sink), ec);  // returns when the peer closes
  return ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset;
}

TEST(PsFailure, MalformedOrForgedHeaderClosesOnlyThatConnection) {
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-world-size", "2", "--data-port-base", "auto",
                                "--optimizer", "sgd", "--lr", "0.5"});
  const std::uint16_t data_port = phubd.data_port_base;
  client::PsClientOptions options;
  options.port = phubd.port;
  auto tensors = TestTensors({3000, 7});
  auto workers = ConnectWorkers(options, 2, {0, 1}, tensors);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  std::thread init0([&] { EXPECT_TRUE(workers[0].client->Init().ok()); });
  ASSERT_TRUE(workers[1].client->Init().ok());
  init0.join();

  // Garbage bytes, then a well-formed ATTACH with a forged session: both are dropped.
  EXPECT_TRUE(PeerClosesAfter(data_port, std::vector<std::byte>(32, std::byte{0xAB})));
  auto forged = transport::EncodeWireHeader({transport::Op::kAttach, 1, 0, 12345, 0});
  EXPECT_TRUE(PeerClosesAfter(data_port, std::vector<std::byte>(forged.begin(), forged.end())));

  // The job's own connections are untouched: two iterations complete with the right result.
  std::vector<float> start = workers[0].weights[0];
  for (std::uint64_t it = 1; it <= 2; ++it) {
    std::thread t0([&] { EXPECT_TRUE(RunIteration(workers[0], it).ok()); });
    ASSERT_TRUE(RunIteration(workers[1], it).ok());
    t0.join();
  }
  for (std::size_t i = 0; i < start.size(); i += 97) {
    double expected = start[i];
    for (std::uint64_t it = 1; it <= 2; ++it) {
      expected -= 0.5 * (TestValue(1, 0, it, 0, i) + TestValue(1, 1, it, 0, i)) / 2.0;
    }
    EXPECT_NEAR(workers[1].weights[0][i], expected, 1e-5) << "element " << i;
  }
  EXPECT_EQ(workers[0].weights, workers[1].weights);
  for (auto& w : workers) EXPECT_TRUE(w.client->Close().ok());
  EXPECT_TRUE(phubd.process.Running());
  std::string log = ReadFile(phubd.log_path);
  EXPECT_THAT(log, HasSubstr("bad magic"));
  EXPECT_THAT(log, HasSubstr("session"));
}

// On TCP everywhere; on verbs where there is an RDMA device (the soft-RoCE guest): there the
// dead worker's queue pairs are found through their TCP side channels and put in error.
class DyingWorkerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(DyingWorkerTest, StallsTheJobButNotTheDaemon) {
  if (GetParam() == "verbs" && transport::verbs::ListDevices().empty()) {
    GTEST_SKIP() << "no RDMA device here: tests/verbs/run_verbs_tests.sh runs this in a QEMU "
                    "guest with soft-RoCE";
  }
  TempDir dir;
  // --rejoin-timeout-ms 0: the job stalls at once (waiting for a rejoin: recovery_test.cc).
  auto phubd = StartPhubd(dir, {"--max-world-size", "3", "--cores", "2", "--chunk-bytes", "4096",
                                "--transport", GetParam(), "--rejoin-timeout-ms", "0"});
  const std::string sizes = "5000,300,20000";
  // Rank 2 is a real process that SIGKILLs itself half-way through iteration 2.
  Process dying = Process::Start({TestWorkerPath(), "--port", std::to_string(phubd.port), "--rank",
                                  "2", "--world", "3", "--tensors", sizes, "--iters", "5",
                                  "--die-at", "2"},
                                 dir.File("dying.log"));
  client::PsClientOptions options;
  options.port = phubd.port;
  auto workers = ConnectWorkers(options, 3, {0, 1}, TestTensors(ParseSizes(sizes)));
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;

  std::vector<Status> outcome(2);
  std::vector<std::thread> threads;
  for (int k = 0; k < 2; ++k) {
    threads.emplace_back([&, k] {
      outcome[k] = workers[k].client->Init();
      for (std::uint64_t it = 1; it <= 5 && outcome[k].ok(); ++it) {
        outcome[k] = RunIteration(workers[k], it);
      }
    });
  }
  for (auto& t : threads) t.join();
  auto code = dying.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 128 + SIGKILL);
  for (int k = 0; k < 2; ++k) {
    // Aborted: a stalled job is not to be reconnected to (Unavailable would invite it).
    EXPECT_EQ(outcome[k].code(), absl::StatusCode::kAborted) << outcome[k];
    EXPECT_THAT(std::string(outcome[k].message()), HasSubstr("stalled"));
    EXPECT_THAT(std::string(outcome[k].message()), HasSubstr("rank 2"));
  }
  EXPECT_TRUE(phubd.process.Running());
  for (auto& w : workers) w.client.reset();

  // The daemon serves the next job as if nothing happened.
  std::vector<Process> next;
  for (int r = 0; r < 3; ++r) {
    next.push_back(Process::Start({TestWorkerPath(), "--port", std::to_string(phubd.port), "--rank",
                                   std::to_string(r), "--world", "3", "--tensors", sizes, "--iters",
                                   "2"},
                                  dir.File("next" + std::to_string(r) + ".log")));
  }
  for (int r = 0; r < 3; ++r) {
    auto c = next[r].Wait(std::chrono::seconds(60));
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(*c, 0) << ReadFile(dir.File("next" + std::to_string(r) + ".log"));
  }
  EXPECT_THAT(ReadFile(phubd.log_path), HasSubstr("stalled"));
  EXPECT_TRUE(phubd.process.Running());
}

INSTANTIATE_TEST_SUITE_P(Transports, DyingWorkerTest, ::testing::Values("tcp", "verbs", "shm"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace phub::testing
