// A worker that says BYE and closes while phubd is still writing it weights (a worker leaving
// with weights in flight): phubd's write fails on the reset, but the BYE is in phubd's socket
// already, and phubd reads it before the connection closes, so the worker left; it was not
// lost. When the failed write closed the connection at once, phubd took the worker for lost and
// the job stalled (found with phub.torch, which now installs pending weights before it leaves).
// The worker is played by hand (a PsClient no longer resets: it finishes its connections), and
// phubd is stopped while the BYE and the reset arrive, so they are waiting in phubd's socket
// together, as a loaded phubd finds them. The PsClient's own side of such a leave (Finish:
// nothing it sent is lost to a reset) and its bound when phubd takes no BYE follow.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "spdlog/sinks/ringbuffer_sink.h"
#include "spdlog/spdlog.h"

#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/integration/process.h"
#include "tests/support/forged_client.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using transport::Op;

// What this process logs (spdlog's default logger) while it lives: a worker's own warnings.
class CapturedLog {
 public:
  CapturedLog() : previous_(spdlog::default_logger()) {
    spdlog::set_default_logger(std::make_shared<spdlog::logger>("captured", sink_));
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  std::string Text() const {
    std::string text;
    for (const std::string& line : sink_->last_formatted()) text += line;
    return text;
  }

 private:
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> sink_ =
      std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(1000);
  std::shared_ptr<spdlog::logger> previous_;
};

// phubd's log once the job ended: rank 0 said goodbye, was not lost, the job did not stall.
void ExpectRankZeroLeftCleanly(RunningPhubd& phubd) {
  const std::string log = AwaitLog(phubd.log_path, {"job 'default' ended"});
  EXPECT_THAT(log, HasSubstr("rank 0 says goodbye")) << log;
  EXPECT_THAT(log, Not(HasSubstr("lost rank"))) << log;
  EXPECT_THAT(log, Not(HasSubstr("stalled"))) << log;
  EXPECT_TRUE(phubd.process.Running());
}

// The one worker of a job of one 32 MiB tensor (more than the sockets hold), past Init and
// its first iteration.
void JoinAndRunAnIteration(const RunningPhubd& phubd, std::vector<InProcessWorker>& workers) {
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 5000;
  workers = ConnectWorkers(options, 1, {0}, TestTensors({8u << 20}));
  ASSERT_TRUE(workers[0].status.ok()) << workers[0].status;
  ASSERT_TRUE(workers[0].client->Init().ok());
  ASSERT_TRUE(RunIteration(workers[0], 1).ok());
}

TEST(LeaveInFlightTest, AByeAheadOfAResetIsReadSoTheWorkerLeftAndWasNotLost) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "1"});
  // 32 MiB of weights: more than the sockets' buffers hold, so phubd is still writing.
  const std::vector<keys::TensorSpec> model = {{"w", 8u << 20}};
  ForgedMember member;
  ASSERT_TRUE(member.SendHello(phubd.port, MakeHello(0, 1, model)));
  ASSERT_EQ(member.AwaitWelcome(model, Millis(10000)), "");
  ASSERT_TRUE(member.AttachAll());
  RawSocket& data = member.data[0];
  std::vector<std::byte> payload;
  for (const keys::Chunk& chunk : member.table->chunks()) {
    payload.assign(chunk.bytes(), std::byte{0});
    const auto bytes = static_cast<std::uint32_t>(payload.size());
    ASSERT_TRUE(data.SendWire(Header(Op::kInit, 0, chunk.id, 0, bytes), payload));
    ASSERT_TRUE(data.SendWire(Header(Op::kPush, 0, chunk.id, 1, bytes), payload));
  }
  // Every push is in phubd's socket, and weights pile up unread here (a socket that is not
  // read keeps its first, small receive buffer): phubd is writing.
  ASSERT_TRUE(WaitFor([&] { return data.Unacknowledged() == 0; }, Millis(30000)));
  ASSERT_TRUE(WaitFor([&] { return data.Unread() >= (64u << 10); }, Millis(30000)))
      << ReadFile(phubd.log_path);
  phubd.process.Kill(SIGSTOP);
  ASSERT_TRUE(data.SendWire(Header(Op::kBye, 0, 0, 0, 0)));
  ASSERT_TRUE(WaitFor([&] { return data.Unacknowledged() == 0; }, Millis(10000)));
  data.Close();  // unread weights: the kernel resets the connection
  ASSERT_TRUE(member.control.SendMessage(WrapGoodbye(1)));
  phubd.process.Kill(SIGCONT);
  ExpectRankZeroLeftCleanly(phubd);
}

// A PsClient that closes at once after pushing 32 MiB: phubd sums each chunk as it lands (one
// worker) and writes its weights back while the last pushes and the BYE are still in this
// side's kernel. Its Close reads phubd's weights to the end (Finish) instead of resetting the
// connection, which threw those last bytes away: phubd took the worker for lost and the job
// stalled.
TEST(LeaveInFlightTest, AWorkerClosingWithItsLastPushesQueuedLeavesCleanly) {
  TempDir dir;
  // Small socket buffers keep the last pushes waiting in the worker's kernel; a liveness bound
  // (which bounds Close) that a loaded sanitizer build cannot reach.
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--socket-buffer-bytes", "16384",
                                        "--liveness-timeout-ms", "60000"});
  std::vector<InProcessWorker> workers;
  ASSERT_NO_FATAL_FAILURE(JoinAndRunAnIteration(phubd, workers));
  InProcessWorker& w = workers[0];
  ASSERT_TRUE(w.client->Push(0, w.grads[0]).ok());
  CapturedLog worker_log;
  EXPECT_TRUE(w.client->Close().ok());
  // Every connection's Finish ended on phubd's end, none at the bound. (With two reads
  // outstanding at once, one never saw the end: Close waited out its bound, under TSan.)
  EXPECT_THAT(worker_log.Text(), Not(HasSubstr("leaving through"))) << worker_log.Text();
  EXPECT_THAT(worker_log.Text(), Not(HasSubstr("BYE on none or only some"))) << worker_log.Text();
  ExpectRankZeroLeftCleanly(phubd);
}

// A phubd that is stopped takes no BYE: Close gives up at its bound (phubd's liveness bound,
// 2 s here, for the data connections; at most 5 s for the Goodbye) instead of waiting for good.
TEST(LeaveInFlightTest, CloseReturnsWhenAStoppedPhubdTakesNoBye) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "1", "--liveness-timeout-ms", "2000"});
  std::vector<InProcessWorker> workers;
  ASSERT_NO_FATAL_FAILURE(JoinAndRunAnIteration(phubd, workers));
  InProcessWorker& w = workers[0];
  phubd.process.Kill(SIGSTOP);
  // 32 MiB more: the BYE cannot leave behind them.
  ASSERT_TRUE(w.client->Push(0, w.grads[0]).ok());
  CapturedLog worker_log;
  auto close = std::async(std::launch::async, [&] { return w.client->Close(); });
  const bool returned = close.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  phubd.process.Kill(SIGCONT);
  ASSERT_TRUE(returned) << "Close still waiting for a stopped phubd after 60 s";
  EXPECT_TRUE(close.get().ok());
  EXPECT_THAT(worker_log.Text(), HasSubstr("BYE on none or only some of its 1 data connections "
                                           "within 2000 ms"))
      << worker_log.Text();
  EXPECT_TRUE(phubd.process.Running());
}

}  // namespace
}  // namespace phub::testing
