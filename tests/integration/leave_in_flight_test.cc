// A worker that says BYE and closes while phubd is still writing it weights (a worker leaving
// with weights in flight): phubd's write fails on the reset, but the BYE is in phubd's socket
// already, and phubd reads it before the connection closes, so the worker left; it was not
// lost. When the failed write closed the connection at once, phubd took the worker for lost and
// the job stalled (found with phub.torch, which now installs pending weights before it leaves).
// The worker is played by hand (a PsClient's reset can also discard its own last bytes, before
// phubd has them), and phubd is stopped while the BYE and the reset arrive, so they are waiting
// in phubd's socket together, as a loaded phubd finds them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>

#include "tests/integration/phubd_launcher.h"
#include "tests/integration/process.h"
#include "tests/support/forged_client.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using transport::Op;

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
  const std::string log = AwaitLog(phubd.log_path, {"job 'default' ended"});
  EXPECT_THAT(log, HasSubstr("rank 0 says goodbye")) << log;
  EXPECT_THAT(log, Not(HasSubstr("lost rank"))) << log;
  EXPECT_THAT(log, Not(HasSubstr("stalled"))) << log;
  EXPECT_TRUE(phubd.process.Running());
}

}  // namespace
}  // namespace phub::testing
