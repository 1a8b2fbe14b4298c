// Control-plane attacks on a real phubd: messages out of place (a second message from a joined
// worker, a Hello mid-job, Goodbyes before Hello or twice), half-closed and silent sockets, a
// Hello that never gets a partner, and a megabyte of tensor name. Each is refused or timed out
// with an Error, whatever it held (a rank, a job) is freed, and a real job runs afterwards.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <thread>

#include "tests/integration/hostile_fixture.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr auto kPromptly = std::chrono::seconds(2);

std::int64_t MillisSince(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

// What a joined worker (Hello accepted, job still forming) sends next.
struct SecondMessage {
  std::string name;
  std::function<bool(RawSocket&)> send;
  bool refused_with_an_error = true;  // else: only closed
};

std::ostream& operator<<(std::ostream& out, const SecondMessage& m) { return out << m.name; }

std::vector<SecondMessage> SecondMessages() {
  auto message = [](proto::ControlMessage m) {
    return [m](RawSocket& s) { return s.SendMessage(m); };
  };
  proto::ControlMessage welcome;
  welcome.mutable_welcome()->set_session(1);
  proto::ControlMessage verbs;
  verbs.mutable_verbs_endpoint()->set_qpn(1);
  proto::ControlMessage error;
  error.mutable_error()->set_message("hello from a worker");
  return {
      {"TheSameHelloAgain", message(Wrap(MakeHello(0, 2, kHostileModel)))},
      {"AHelloForAnotherRank", message(Wrap(MakeHello(1, 2, kHostileModel)))},
      {"AGoodbyeBeforeTheJobStarts", message(WrapGoodbye(3))},
      {"AWelcome", message(welcome)},
      {"AVerbsEndpoint", message(verbs)},
      {"AnError", message(error)},
      {"AnEmptyMessage", message(proto::ControlMessage{})},
      {"AFrameThatDoesNotParse",
       [](RawSocket& s) {
         return s.Send(std::string_view("\x05\x00\x00\x00\xff\xff\xff\xff\xff", 9));
       },
       /*refused_with_an_error=*/false},
  };
}

class HostileJoinedWorker : public ::testing::TestWithParam<SecondMessage> {};

// Rank 0 of a forming job of 2 sends its Hello, then the message. Bounds: refused (Error
// BAD_REQUEST, unless the frame does not parse) and closed within 2 s; rank 0 is free again: a
// real 2-worker job completes within 20 s.
TEST_P(HostileJoinedWorker, SecondMessageIsRefusedAndFreesItsRank) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  RawSocket socket = RawSocket::Connect(phubd.port);
  ASSERT_TRUE(socket.SendMessage(Wrap(MakeHello(0, 2, kHostileModel))));
  ASSERT_TRUE(GetParam().send(socket));
  if (GetParam().refused_with_an_error) {
    ExpectErrorThenClose(socket, kPromptly, proto::Error::BAD_REQUEST);
  } else {
    EXPECT_TRUE(socket.WaitClosed(kPromptly)) << "phubd kept the connection open";
  }
  socket.Close();
  ExpectServesAJobAndStaysSmall(phubd);
}

INSTANTIATE_TEST_SUITE_P(Messages, HostileJoinedWorker, ::testing::ValuesIn(SecondMessages()),
                         [](const auto& info) { return info.param.name; });

// A member of a running job sends a second Hello on its control connection. Bounds: Error
// BAD_REQUEST and closed within 2 s; the other member fails with "stalled" within 5 s; once it
// is gone the job ends and a real job completes within 20 s.
TEST(HostileControlPlane, SecondHelloMidJobIsRefusedAndTheJobEnds) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, 1, job));
  ASSERT_TRUE(job.forged.control.SendMessage(Wrap(MakeHello(1, 2, kHostileModel))));
  ExpectErrorThenClose(job.forged.control, kPromptly, proto::Error::BAD_REQUEST);

  Status honest_outcome;
  EXPECT_TRUE(RunBounded(phubd, std::chrono::seconds(5), [&] {
    honest_outcome = job.honest.client->Init();
    if (honest_outcome.ok()) honest_outcome = RunIteration(job.honest, 1);
  })) << "the honest worker neither finished nor failed within 5 s";
  EXPECT_THAT(std::string(honest_outcome.message()), HasSubstr("stalled")) << honest_outcome;
  job.honest.client.reset();
  ForgedVanish(job.forged);
  ExpectServesAJobAndStaysSmall(phubd);
}

// A Goodbye as the first message: Error BAD_REQUEST and closed within 2 s; a job then runs.
TEST(HostileControlPlane, GoodbyeBeforeHelloIsRefused) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  RawSocket socket = RawSocket::Connect(phubd.port);
  ASSERT_TRUE(socket.SendMessage(WrapGoodbye(1)));
  ExpectErrorThenClose(socket, kPromptly, proto::Error::BAD_REQUEST);
  ExpectServesAJobAndStaysSmall(phubd);
}

// A member leaves with BYE and two Goodbyes (the honest one has closed cleanly): phubd stays up,
// the job ends, and a real job completes within 20 s.
TEST(HostileControlPlane, GoodbyeTwiceIsHarmless) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, 1, job));
  EXPECT_TRUE(RunBounded(phubd, std::chrono::seconds(5),
                         [&] { EXPECT_TRUE(job.honest.client->Close().ok()); }));
  job.honest.client.reset();
  for (RawSocket& s : job.forged.data) s.SendWire(Header(transport::Op::kBye, 1, 0, 0, 0));
  job.forged.control.SendMessage(WrapGoodbye(0));
  job.forged.control.SendMessage(WrapGoodbye(0));
  // Refusing the second Goodbye or ignoring it are both fine; dying or wedging are not.
  job.forged.control.WaitClosed(std::chrono::milliseconds(300));
  ForgedVanish(job.forged);
  ExpectServesAJobAndStaysSmall(phubd);
}

// A half-closed control connection: before its Hello it is closed within 2 s; after its Hello
// (rank 0 of a forming job) it is closed within 2 s and rank 0 is free for a real job.
TEST(HostileControlPlane, HalfClosedConnectionsAreClosedAndFreeTheirRank) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  RawSocket silent = RawSocket::Connect(phubd.port);
  silent.ShutdownWrite();
  EXPECT_TRUE(silent.WaitClosed(kPromptly)) << "a half-closed connection without Hello was kept";
  RawSocket joined = RawSocket::Connect(phubd.port);
  ASSERT_TRUE(joined.SendMessage(Wrap(MakeHello(0, 2, kHostileModel))));
  joined.ShutdownWrite();
  EXPECT_TRUE(joined.WaitClosed(kPromptly)) << "a half-closed joined worker was kept";
  ExpectServesAJobAndStaysSmall(phubd);
}

// A member's data connections are lost but both members keep their control connections open
// and silent. The forged member is dropped at once with CONNECTION_LOST (the Error within the
// bounded wait's 3 s, its EOF within 2 s more); the job stalls (--rejoin-timeout-ms 0), and with
// --stalled-job-timeout-ms 500 the honest PsClient, still connected, is dropped too, so the job
// ends and a real job completes within 20 s.
TEST(HostileControlPlane, StalledJobMembersThatStayAreClosed) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir, {"--stalled-job-timeout-ms", "500"});
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, 1, job));
  for (RawSocket& s : job.forged.data) s.Close();  // lost without BYE
  // Its data connections gone, the member is dropped at once (told why: it may rejoin); the
  // job stalls (--rejoin-timeout-ms 0) and the honest member, which stays, is closed after
  // --stalled-job-timeout-ms: only then can the next job form.
  ExpectErrorThenClose(job.forged.control, std::chrono::seconds(3),
                       proto::Error::CONNECTION_LOST);
  EXPECT_TRUE(AJobCompletes(phubd));  // while the honest client is still there
  job.honest.client.reset();
  EXPECT_TRUE(StaysSmall(phubd));
}

// Found while attacking phubd at 2279408, fixed since: a member says BYE and Goodbye and then
// keeps its connections open, silent. phubd used to wait for the close with no deadline
// (State::kLeaving), so the job never ended and every later Hello was refused "a job of 2
// workers is running" for good. Bound: a real job completes within 20 s.
TEST(HostileControlPlane, GoodbyeThenSilenceDoesNotHoldTheJob) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, 1, job));
  EXPECT_TRUE(RunBounded(phubd, std::chrono::seconds(5),
                         [&] { EXPECT_TRUE(job.honest.client->Close().ok()); }));
  job.honest.client.reset();
  for (RawSocket& s : job.forged.data) s.SendWire(Header(transport::Op::kBye, 1, 0, 0, 0));
  ASSERT_TRUE(job.forged.control.SendMessage(WrapGoodbye(0)));
  ExpectServesAJobAndStaysSmall(phubd);  // the forged member's sockets are still open
}

// Found while attacking phubd at 2279408, fixed since: a member leaves cleanly (BYE, Goodbye,
// close) after the initial weights, without pushing iteration 1. A Goodbye used to suppress the
// stall, so the honest worker waited for its push for ever. Bound: the honest worker fails
// within 5 s, told that rank 1 left; a real job then completes.
TEST(HostileControlPlane, CleanLeaveMidJobFailsTheOthers) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, 1, job));
  Status honest_outcome;
  BackgroundTask honest(phubd, [&] {
    honest_outcome = job.honest.client->Init();
    if (honest_outcome.ok()) honest_outcome = RunIteration(job.honest, 1);
  });
  ASSERT_TRUE(ReadInitialWeights(job.forged, 0, std::chrono::seconds(5)));
  ForgedLeave(job.forged);
  EXPECT_TRUE(honest.Finish(std::chrono::seconds(5)))
      << "the honest worker neither finished nor failed within 5 s";
  EXPECT_FALSE(honest_outcome.ok());
  EXPECT_THAT(std::string(honest_outcome.message()), HasSubstr("rank 1")) << honest_outcome;
  job.honest.client.reset();
  ExpectServesAJobAndStaysSmall(phubd);
}

// The other side of the Goodbye: the honest member says Goodbye and the forged one stays in the
// job, connected and silent (no BYE, no push: nothing a shard would notice). With
// --leave-timeout-ms 500 it gets Error TIMEOUT naming the flag, no sooner than 0.4 s after the
// Goodbye and within the bounded wait (3 s, then 2 s for the EOF), and is closed; the job ends and a real job completes within 20 s.
TEST(HostileControlPlane, MemberSilentAfterAnothersGoodbyeIsClosed) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir, {"--leave-timeout-ms", "500"});
  ForgedJob job;
  ASSERT_TRUE(FormForgedJob(phubd, 1, job));
  const auto start = Clock::now();
  EXPECT_TRUE(RunBounded(phubd, std::chrono::seconds(5),
                         [&] { EXPECT_TRUE(job.honest.client->Close().ok()); }));
  job.honest.client.reset();
  proto::Error error =
      ExpectErrorThenClose(job.forged.control, std::chrono::seconds(3), proto::Error::TIMEOUT);
  const auto elapsed = MillisSince(start);
  EXPECT_GE(elapsed, 400) << "closed before --leave-timeout-ms";
  EXPECT_THAT(error.message() + error.fix(), HasSubstr("--leave-timeout-ms"));
  ExpectServesAJobAndStaysSmall(phubd);  // the forged data connections are still open
}

// A member takes its Welcome and never opens a data connection, so no shard ever hears of it.
// With --attach-timeout-ms 500 the job stalls (JOB_STALLED naming --attach-timeout-ms, to both
// members), no sooner than 0.4 s after the Welcome and within the bounded wait (3 s), and with
// --stalled-job-timeout-ms 500 the silent member is closed (EOF within 2 s more); a real job then completes within 20 s.
TEST(HostileControlPlane, WelcomedMemberThatNeverAttachesStallsTheJob) {
  TempDir dir;
  auto phubd = StartHostilePhubd(
      dir, {"--attach-timeout-ms", "500", "--stalled-job-timeout-ms", "500", "--cores", "2"});
  ForgedJob job;
  const auto start = Clock::now();
  ASSERT_TRUE(FormForgedJob(phubd, 1, job, /*attach=*/false));
  proto::Error error = ExpectErrorThenClose(job.forged.control, std::chrono::seconds(3),
                                            proto::Error::JOB_STALLED);
  const auto elapsed = MillisSince(start);
  EXPECT_GE(elapsed, 400) << "stalled before --attach-timeout-ms";
  EXPECT_THAT(error.message(), HasSubstr("--attach-timeout-ms"));
  job.honest.client.reset();
  ExpectServesAJobAndStaysSmall(phubd);
}

// Bytes that are not a ControlMessage: closed within 2 s (an Error first is allowed); a job
// then runs.
TEST(HostileControlPlane, GarbageOnTheControlPortIsDropped) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  RawSocket socket = RawSocket::Connect(phubd.port);
  ASSERT_TRUE(socket.Send(std::string_view("\x10\x00\x00\x00GET / HTTP/1.1\r\n\r\n", 22)));
  EXPECT_TRUE(socket.WaitClosed(kPromptly));
  ExpectServesAJobAndStaysSmall(phubd);
}

// Attack 6: rank 0 of 2 says Hello and nothing else, and no rank 1 comes. With
// --form-timeout-ms 1000 it gets Error TIMEOUT after 0.8-3 s (2x the deadline + 1 s of slack)
// and is closed; rank 0 is free and a real job completes within 20 s.
TEST(HostileControlPlane, SilentHelloHolderTimesOutAndFreesItsRank) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir, {"--form-timeout-ms", "1000"});
  const auto start = Clock::now();
  RawSocket holder = RawSocket::Connect(phubd.port);
  ASSERT_TRUE(holder.SendMessage(Wrap(MakeHello(0, 2, kHostileModel))));
  proto::Error error = ExpectErrorThenClose(holder, std::chrono::seconds(3), proto::Error::TIMEOUT);
  const auto elapsed = MillisSince(start);
  EXPECT_GE(elapsed, 800) << "timed out before --form-timeout-ms";
  EXPECT_THAT(error.message() + error.fix(), HasSubstr("--form-timeout-ms"));
  ExpectServesAJobAndStaysSmall(phubd);
}

// Sends `hello`; returns phubd's reply, or an empty message if none came in `timeout` (the
// worker joined and waits). Retries while phubd still holds `hello`'s rank for a peer that just
// left (DUPLICATE_RANK), for up to 2 s.
proto::ControlMessage HelloAndReply(RawSocket& socket, std::uint16_t port,
                                    const proto::Hello& hello, std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + kPromptly;
  while (true) {
    socket = RawSocket::Connect(port);
    proto::ControlMessage reply;
    if (!socket.SendMessage(Wrap(hello)) ||
        socket.ReadMessage(reply, timeout) != RawSocket::Read::kOk) {
      return {};
    }
    if (!reply.has_error() || reply.error().code() != proto::Error::DUPLICATE_RANK ||
        Clock::now() >= deadline) {
      return reply;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Attack 7: a 1 MiB tensor name, in the joined worker's table and in the refused one's. Each
// Error's message + fix stays under 1 KiB, and phubd's log under 64 KiB; a real job then
// completes within 20 s.
TEST(HostileControlPlane, LongTensorNameIsNotEchoed) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  std::vector<keys::TensorSpec> long_named = kHostileModel;
  long_named[0].name = std::string(1 << 20, 'x');
  for (int long_one = 0; long_one < 2; ++long_one) {
    // The worker with the long name joins first (so its name is echoed to the other), then
    // the other way round.
    const auto& first_table = long_one == 0 ? long_named : kHostileModel;
    const auto& second_table = long_one == 0 ? kHostileModel : long_named;
    RawSocket first;
    proto::ControlMessage joined = HelloAndReply(first, phubd.port, MakeHello(0, 2, first_table),
                                                 std::chrono::milliseconds(500));
    ASSERT_FALSE(joined.has_error()) << joined.error().message().substr(0, 200);
    RawSocket second;
    proto::ControlMessage refused =
        HelloAndReply(second, phubd.port, MakeHello(1, 2, second_table), kPromptly);
    ASSERT_TRUE(refused.has_error()) << "the mismatching Hello was not refused";
    EXPECT_EQ(refused.error().code(), proto::Error::TENSOR_TABLE_MISMATCH);
    EXPECT_LT(refused.error().message().size() + refused.error().fix().size(), 1024u)
        << refused.error().message().substr(0, 200) << "...";
  }
  ExpectServesAJobAndStaysSmall(phubd);
  std::error_code ec;
  EXPECT_LT(std::filesystem::file_size(phubd.log_path, ec), 64u << 10)
      << "phubd's log grew by the peer's megabyte";
}

// What a peer names reaches phubd's log only escaped (issue 38, item 9): a job name with a
// newline and a fake log prefix cannot forge a line, and ANSI escapes (in a job name, a wire
// format, a tensor name) cannot reach the operator's terminal. Bounds: each Hello refused within
// 2 s; the log holds no control byte but its line ends, no line that starts with the forged
// prefix, and each string escaped as \n and \x1b.
TEST(HostileControlPlane, PeerStringsReachTheLogOnlyEscaped) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir);
  const std::string forged_line = "[2026-11-27 00:00:00.000] [phubd] [info] forged";
  const auto refused = [&](proto::Hello hello, proto::Error::Code code) {
    RawSocket socket;
    proto::ControlMessage reply = HelloAndReply(socket, phubd.port, hello, kPromptly);
    ASSERT_TRUE(reply.has_error()) << "the hostile Hello was not refused";
    EXPECT_EQ(reply.error().code(), code) << reply.error().message();
    for (char c : reply.error().message() + reply.error().fix()) {
      EXPECT_TRUE(c >= 0x20 && c < 0x7f) << "phubd's Error echoes a raw byte " << int(c);
    }
  };
  proto::Hello newline = MakeHello(0, 2, kHostileModel);
  newline.set_job("x\n" + forged_line);
  refused(newline, proto::Error::BAD_REQUEST);
  proto::Hello ansi = MakeHello(0, 2, kHostileModel);
  ansi.set_job("\x1b[31mred\x1b[0m");
  refused(ansi, proto::Error::BAD_REQUEST);
  proto::Hello wire = MakeHello(0, 2, kHostileModel);
  wire.set_wire("\x1b[31m\n" + forged_line.substr(0, 8));
  // The refusal's code is admission's business; only its text matters here.
  {
    RawSocket socket;
    proto::ControlMessage reply = HelloAndReply(socket, phubd.port, wire, kPromptly);
    ASSERT_TRUE(reply.has_error()) << "a Hello with a wire format of escapes was not refused";
  }
  {
    // A tensor name with a newline, echoed in TENSOR_TABLE_MISMATCH against a forming job.
    RawSocket first;
    proto::ControlMessage joined =
        HelloAndReply(first, phubd.port, MakeHello(0, 2, kHostileModel), kPromptly);
    ASSERT_FALSE(joined.has_error()) << joined.error().message();
    refused(MakeHello(1, 2, {{"a\n" + forged_line + "\x1b[2J", 40}, {"b", 20}}),
            proto::Error::TENSOR_TABLE_MISMATCH);
  }
  ExpectServesAJobAndStaysSmall(phubd);

  const std::string log = ReadFile(phubd.log_path);
  for (char c : log) {
    ASSERT_TRUE(c == '\n' || (c >= 0x20 && c < 0x7f))
        << "a raw byte " << int(static_cast<unsigned char>(c)) << " in phubd's log:\n"
        << log;
  }
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_FALSE(line.starts_with("[2026-11-27 00:00:00.000]")) << "a forged line:\n" << log;
  }
  EXPECT_THAT(log, HasSubstr("x\\n[2026-11-27 00:00:00.000] [phubd] [info] forged")) << log;
  EXPECT_THAT(log, HasSubstr("\\x1b[31mred\\x1b[0m")) << log;
  EXPECT_THAT(log, HasSubstr("'a\\n[2026-11-27")) << log;
}

// A job whose hyper-parameters change per iteration (docs/protocol.md "Hyper-parameters per
// iteration"): a member that pushes an iteration without ever sending its values cannot hold
// the job. Every chunk has all its copies and waits for the values; within phubd's liveness
// timeout (1.5 s here; the forged member keeps its control connection alive with Heartbeats, so
// this is not a silent member's loss) the job stalls, and the honest worker is told which rank
// sent none. Then phubd serves the next job.
TEST(HostileControlPlane, AMemberThatPushesWithoutItsValuesStallsTheJobNamingIt) {
  TempDir dir;
  auto phubd = StartHostilePhubd(dir, {"--cores", "1", "--liveness-timeout-ms", "1500"});
  proto::Hello hello = MakeHello(1, 2, kHostileModel);
  hello.set_per_iteration_values(true);
  hello.mutable_optimizer()->set_kind("sgd");
  hello.mutable_optimizer()->set_lr(0.5f);
  ForgedMember forged;
  ASSERT_TRUE(forged.SendHello(phubd.port, hello));
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 2000;
  options.optimizer = kernels::OptimizerConfig{.kind = kernels::OptimizerKind::kSgd, .lr = 0.5f};
  options.per_iteration_values = true;
  InProcessWorker honest;
  std::string welcome_error;
  ASSERT_TRUE(RunBounded(phubd, std::chrono::seconds(10), [&] {
    std::thread join([&] {
      welcome_error = forged.AwaitWelcome(kHostileModel, std::chrono::seconds(8));
      if (welcome_error.empty() && !forged.AttachAll()) welcome_error = "cannot attach";
    });
    honest = std::move(ConnectWorkers(options, 2, {0}, kHostileModel)[0]);
    join.join();
  }));
  ASSERT_EQ(welcome_error, "");
  ASSERT_TRUE(honest.status.ok()) << honest.status;
  ASSERT_TRUE(forged.welcome.per_iteration_values());

  Status honest_result;
  BackgroundTask task(phubd, [&] {
    honest_result = honest.client->Init();
    if (honest_result.ok()) honest_result = honest.client->StepWith({.lr = 0.5f});
    if (honest_result.ok()) honest_result = RunIteration(honest, 1);
  });
  // The forged rank pushes iteration 1 without StepValues; no weights may come back.
  ASSERT_TRUE(ReadInitialWeights(forged, 0, std::chrono::seconds(5)));
  EXPECT_FALSE(ForgedIteration(forged, 1, std::chrono::milliseconds(300)));
  proto::ControlMessage heartbeat;
  heartbeat.mutable_heartbeat();
  proto::Error stalled;
  for (int i = 0; i < 30 && stalled.code() != proto::Error::JOB_STALLED; ++i) {
    ASSERT_TRUE(forged.control.SendMessage(heartbeat));
    proto::ControlMessage message;
    while (forged.control.ReadMessage(message, std::chrono::milliseconds(200)) ==
           RawSocket::Read::kOk) {
      if (message.has_error()) stalled = message.error();
    }
  }
  ASSERT_EQ(stalled.code(), proto::Error::JOB_STALLED) << stalled.message();
  EXPECT_THAT(stalled.message(), HasSubstr("iteration 1's pushes are in, but rank(s) 1 sent no "
                                           "hyper-parameters for it within 1500 ms"));
  ASSERT_TRUE(task.Finish(std::chrono::seconds(5)));
  EXPECT_FALSE(honest_result.ok());
  EXPECT_THAT(honest_result.message(), HasSubstr("rank(s) 1 sent no hyper-parameters"));
  ForgedVanish(forged);
  honest.client.reset();
  ExpectServesAJobAndStaysSmall(phubd);
}

}  // namespace
}  // namespace phub::testing
