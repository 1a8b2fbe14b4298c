// Authentication and admission against a real phubd (issue 38): the token never travels, a
// token file that holds none is refused, failed Hellos are paced per source and answered alike
// whether the job exists or not, and a flood of pending connections from one address neither
// keeps another address's workers out nor lasts past its quota. (Protected mode, which needs a
// second host, is in recovery_liveness_test.cc: Authentication.WithoutATokenOnly...)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "phub/common/token_proof.h"
#include "phub/common/version.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/integration/process.h"
#include "tests/support/forged_client.h"
#include "tests/support/ps_client_thread.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

const std::vector<keys::TensorSpec> kModel = {{"w", 1000}};

double MsSince(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// A worker's Hello for `job` with `token` (MakeHello's convention: answered when sent).
proto::Hello HelloFor(const std::string& job, const std::string& token, std::uint32_t rank = 0,
                      std::uint32_t world = 1) {
  proto::Hello hello = MakeHello(rank, world, kModel, token);
  hello.set_job(job);
  return hello;
}

// Sends `hello` from `source` and returns phubd's answer (or an empty message).
proto::ControlMessage Answer(std::uint16_t port, const proto::Hello& hello,
                             const std::string& source = "", Millis timeout = Millis(15000)) {
  RawSocket socket = RawSocket::Connect(port, Millis(5000), source);
  EXPECT_TRUE(socket.connected());
  EXPECT_TRUE(socket.SendMessage(Wrap(hello)));
  proto::ControlMessage reply;
  EXPECT_EQ(socket.ReadMessage(reply, timeout), RawSocket::Read::kOk);
  return reply;
}

// What a real PsClient sends, seen by a listener that plays phubd: a proof, never the token.
TEST(Authentication, TheHelloCarriesAProofOfTheTokenNeverTheToken) {
  RawListener listener = RawListener::Listen();
  ASSERT_TRUE(listener.listening());
  const std::string token = "the-team's-secret-7f3a9c";
  client::PsClientOptions options;
  options.port = listener.port();
  options.job = "tenant-a";
  options.job_token = token;
  options.connect_timeout_ms = 2000;
  PsClientThread client(options, {0, 1}, kModel, {std::vector<float>(1000)},
                        [&listener] { listener.Close(); });
  PsClientThread::Call connect = client.Connect();
  RawSocket phubd = listener.Accept(Millis(5000));
  ASSERT_TRUE(phubd.connected());
  proto::ControlMessage challenge;
  const std::string nonce(kChallengeNonceBytes, '\x5a');
  challenge.mutable_challenge()->set_nonce(nonce);
  ASSERT_TRUE(phubd.SendMessage(challenge));
  // The Hello's frame, byte for byte.
  std::uint32_t length = 0;
  ASSERT_EQ(phubd.ReadExact(std::as_writable_bytes(std::span<std::uint32_t>(&length, 1)),
                            Millis(5000)),
            RawSocket::Read::kOk);
  ASSERT_LT(length, 1u << 20);
  std::string frame(length, '\0');
  ASSERT_EQ(phubd.ReadExact(std::as_writable_bytes(std::span<char>(frame.data(), frame.size())),
                            Millis(5000)),
            RawSocket::Read::kOk);
  EXPECT_EQ(frame.find(token), std::string::npos) << "the token travels in the Hello";
  proto::ControlMessage hello;
  ASSERT_TRUE(hello.ParseFromString(frame));
  ASSERT_TRUE(hello.has_hello());
  EXPECT_EQ(hello.hello().token_proof(), TokenProof(token, nonce, "tenant-a"));
  EXPECT_EQ(hello.hello().protocol_version(), kProtocolVersion);
  phubd.Close();
}

// A token file that holds no token is an operator's mistake phubd refuses to start with.
TEST(Authentication, ATokenFileWithoutATokenStopsPhubdNamingIt) {
  TempDir dir;
  std::ofstream(dir.File("empty"));
  std::ofstream(dir.File("blank")) << " \t\n\n";
  std::filesystem::create_directory(dir.File("a-directory"));
  for (const std::string name : {"empty", "blank", "a-directory"}) {
    Process phubd = Process::Start(
        {PhubdPath(), "--port", "0", "--token-file", dir.File(name)}, dir.File(name + ".log"));
    EXPECT_EQ(phubd.Wait(milliseconds(20000)), 2) << name;
    EXPECT_THAT(ReadFile(dir.File(name + ".log")), HasSubstr(dir.File(name))) << name;
  }
}

// Under --job-tokens, a job whose file is empty is refused like a wrong token (its workers
// learn nothing more), and phubd tells the operator which file.
TEST(Authentication, AnEmptyJobTokenFileRefusesTheJobAndTellsTheOperator) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("tokens"));
  std::ofstream(dir.File("tokens/hollow")) << "\n";
  RunningPhubd phubd = StartPhubd(dir, {"--job-tokens", dir.File("tokens")});
  const proto::ControlMessage reply = Answer(phubd.port, HelloFor("hollow", ""));
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), proto::Error::BAD_TOKEN);
  EXPECT_THAT(ReadFile(phubd.log_path),
              HasSubstr("token file '" + dir.File("tokens/hollow") + "' holds no token"));
}

// Failed Hellos from one address are answered ever later: 100, 200, 400, 800 ms...; a correct
// one from the same address is not slowed; another address starts afresh.
TEST(Authentication, FailedHellosArePacedPerSource) {
  TempDir dir;
  std::ofstream(dir.File("token")) << "right\n";
  RunningPhubd phubd = StartPhubd(dir, {"--token-file", dir.File("token")});
  const auto start = Clock::now();
  for (int i = 0; i < 5; ++i) {
    const proto::ControlMessage reply = Answer(phubd.port, HelloFor("j", "guess"), "127.0.0.2");
    ASSERT_TRUE(reply.has_error());
    EXPECT_EQ(reply.error().code(), proto::Error::BAD_TOKEN);
  }
  // 100 + 200 + 400 + 800 + 1600 ms (a little less: the count decays meanwhile, by 3 % over
  // these 3 s): five guesses, where ~2,700 a second went before.
  EXPECT_GE(MsSince(start), 2900.0);
  // Another address is refused too, paced from its own first delay (that its record is its
  // own is RefusalPacerTest's; how fast guessing goes, bench/tenants/guess_rate.py's).
  const auto other = Clock::now();
  EXPECT_TRUE(Answer(phubd.port, HelloFor("j", "guess"), "127.0.0.3").has_error());
  EXPECT_GE(MsSince(other), 100.0);
  // The right token from the paced address joins and trains.
  RawSocket worker = RawSocket::Connect(phubd.port, Millis(5000), "127.0.0.2");
  ForgedMember member;
  member.control = std::move(worker);
  ASSERT_TRUE(member.control.SendMessage(Wrap(HelloFor("j", "right"))));
  EXPECT_EQ(member.AwaitWelcome(kModel, Millis(3000)), "");
}

// Whether the job exists, has a token file or not, a wrong token gets the same Error, at the
// same paced time: nothing to tell a tenant from a name nobody uses.
TEST(Authentication, AWrongTokenIsAnsweredAlikeWhetherTheJobExistsOrNot) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("tokens"));
  std::ofstream(dir.File("tokens/real")) << "real-secret\n";
  RunningPhubd phubd = StartPhubd(dir, {"--job-tokens", dir.File("tokens")});
  // The job "real" forms (rank 0 of 2 waits), so it exists in every sense.
  ForgedMember member;
  ASSERT_TRUE(member.SendHello(phubd.port, HelloFor("real", "real-secret", 0, 2)));
  const auto t1 = Clock::now();
  proto::ControlMessage real = Answer(phubd.port, HelloFor("real", "guess", 1, 2), "127.0.0.4");
  const double real_ms = MsSince(t1);
  const auto t2 = Clock::now();
  proto::ControlMessage none = Answer(phubd.port, HelloFor("nobody", "guess", 1, 2), "127.0.0.5");
  const double none_ms = MsSince(t2);
  ASSERT_TRUE(real.has_error() && none.has_error());
  EXPECT_EQ(real.error().code(), none.error().code());
  std::string a = real.error().message(), b = none.error().message();
  a.replace(a.find("'real'"), 6, "'X'");
  b.replace(b.find("'nobody'"), 8, "'X'");
  EXPECT_EQ(a, b);
  EXPECT_EQ(real.error().fix(), none.error().fix());
  // Both wait the first delay (100 ms), which the checks' microseconds disappear in.
  EXPECT_GE(real_ms, 100.0);
  EXPECT_GE(none_ms, 100.0);
}

// One address holding its quota of connections that never say Hello: its next one is closed
// at once, and another address's worker joins as if nothing were going on.
TEST(Authentication, AnAddressAtItsQuotaOfPendingConnectionsKeepsNobodyElseOut) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--max-pending-per-source", "4"});
  std::vector<RawSocket> idle;
  for (int i = 0; i < 4; ++i) {
    idle.push_back(RawSocket::Connect(phubd.port, Millis(5000), "127.0.0.6"));
    proto::ControlMessage challenge;
    ASSERT_EQ(idle.back().ReadFrame(challenge, Millis(5000)), RawSocket::Read::kOk);
    EXPECT_TRUE(challenge.has_challenge());
  }
  RawSocket fifth = RawSocket::Connect(phubd.port, Millis(5000), "127.0.0.6");
  EXPECT_TRUE(fifth.WaitClosed(Millis(5000))) << "the fifth connection was kept";
  ForgedMember member;
  ASSERT_TRUE(member.SendHello(phubd.port, HelloFor("j", "")));
  EXPECT_EQ(member.AwaitWelcome(kModel, Millis(5000)), "");
  EXPECT_THAT(ReadFile(phubd.log_path), HasSubstr("--max-pending-per-source"));
}

// At the total, the oldest pending connection gives way: idle connections from many addresses
// cannot keep a worker out either.
TEST(Authentication, AtThePendingTotalTheOldestGivesWay) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--max-pending-connections", "6"});
  std::vector<RawSocket> idle;
  for (int i = 0; i < 6; ++i) {
    idle.push_back(
        RawSocket::Connect(phubd.port, Millis(5000), "127.0.1." + std::to_string(i + 1)));
    proto::ControlMessage challenge;
    ASSERT_EQ(idle.back().ReadFrame(challenge, Millis(5000)), RawSocket::Read::kOk);
  }
  ForgedMember member;
  ASSERT_TRUE(member.SendHello(phubd.port, HelloFor("j", "")));
  EXPECT_EQ(member.AwaitWelcome(kModel, Millis(5000)), "");
  // The oldest was told why, and closed.
  proto::ControlMessage farewell;
  ASSERT_EQ(idle.front().ReadFrame(farewell, Millis(5000)), RawSocket::Read::kOk);
  ASSERT_TRUE(farewell.has_error());
  EXPECT_EQ(farewell.error().code(), proto::Error::LIMIT_EXCEEDED);
  EXPECT_THAT(farewell.error().message(), HasSubstr("--max-pending-connections"));
}

}  // namespace
}  // namespace phub::testing

namespace phub::testing {
namespace {

// A tenant with a valid token that forms a job and never completes it (one of its two workers)
// holds none of the memory budget: another tenant's job runs. When the squatter's job does
// form, it is refused for memory without a word about what the other holds.
TEST(Admission, AJobThatNeverFormsHoldsNoMemory) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--memory-budget-bytes", "1000000"});
  // 49,500 floats: (198,000 B + 256 B of bookkeeping) x (2 + 3) = 991,280 B of the budget.
  const std::vector<keys::TensorSpec> big = {{"big", 49500}};
  ForgedMember squatter;
  proto::Hello squat = MakeHello(0, 2, big);
  squat.set_job("squat");
  ASSERT_TRUE(squatter.SendHello(phubd.port, squat));
  // 4,256 B x (1 + 3) = 17,024 B: with the squatter charged it would not fit.
  ForgedMember victim;
  ASSERT_TRUE(victim.SendHello(phubd.port, HelloFor("victim", "")));
  EXPECT_EQ(victim.AwaitWelcome(kModel, Millis(5000)), "");
  // The squatter's second worker: the job forms, and the budget cannot hold it now.
  ForgedMember second;
  squat.set_rank(1);
  ASSERT_TRUE(second.SendHello(phubd.port, squat));
  const std::string refused = second.AwaitWelcome(big, Millis(5000));
  EXPECT_THAT(refused, HasSubstr("needs 991280 bytes"));
  EXPECT_THAT(refused, HasSubstr("--memory-budget-bytes"));
  EXPECT_THAT(refused, ::testing::Not(HasSubstr("17024")));
  EXPECT_THAT(refused, ::testing::Not(HasSubstr("victim")));
}

// One address may have only so many jobs forming at once; other addresses are not affected.
TEST(Admission, OneAddressFormsOnlySoManyJobsAtOnce) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--max-forming-jobs-per-source", "2"});
  std::vector<RawSocket> forming;
  for (const std::string job : {"f1", "f2"}) {
    forming.push_back(RawSocket::Connect(phubd.port, Millis(5000), "127.0.0.7"));
    ASSERT_TRUE(forming.back().SendMessage(Wrap(HelloFor(job, "", 0, 2))));
  }
  const proto::ControlMessage third = Answer(phubd.port, HelloFor("f3", "", 0, 2), "127.0.0.7");
  ASSERT_TRUE(third.has_error());
  EXPECT_EQ(third.error().code(), proto::Error::LIMIT_EXCEEDED);
  EXPECT_THAT(third.error().message(), HasSubstr("--max-forming-jobs-per-source 2"));
  ForgedMember other;
  ASSERT_TRUE(other.SendHello(phubd.port, HelloFor("g", "")));
  EXPECT_EQ(other.AwaitWelcome(kModel, Millis(5000)), "");
}

// A job whose worker died holds its name while it waits for the rejoin; a new job under that
// name is told so, not that its tensors differ from a job it never heard of.
TEST(Admission, ANewJobUnderTheNameOfOneAwaitingARejoinIsToldSo) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--rejoin-timeout-ms", "60000"});
  Process worker = Process::Start({TestWorkerPath(), "--comm", "ps", "--port",
                                   std::to_string(phubd.port), "--rank", "0", "--world", "1",
                                   "--tensors", "1000", "--iters", "100000", "--step-delay-ms",
                                   "5", "--progress", dir.File("progress")},
                                  dir.File("worker.log"));
  const auto deadline = Clock::now() + std::chrono::seconds(20);
  while (ReadFile(dir.File("progress")).empty() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  ASSERT_FALSE(ReadFile(dir.File("progress")).empty()) << ReadFile(dir.File("worker.log"));
  worker.Kill(SIGKILL);
  worker.Wait(milliseconds(5000));
  // Until phubd has noticed the loss, the Hello would be a rejoin of a member still connected.
  const auto noticed = Clock::now() + std::chrono::seconds(20);
  while (ReadFile(phubd.log_path).find("was lost") == std::string::npos && Clock::now() < noticed) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  const std::vector<keys::TensorSpec> other = {{"t0", 7}};
  const proto::ControlMessage reply = Answer(phubd.port, MakeHello(0, 1, other));
  ASSERT_TRUE(reply.has_error());
  EXPECT_THAT(reply.error().message(), HasSubstr("waits for rank 0 to rejoin for"));
  EXPECT_THAT(reply.error().message(), HasSubstr("--rejoin-timeout-ms"));
  EXPECT_THAT(reply.error().fix(), HasSubstr("another name"));
}

}  // namespace
}  // namespace phub::testing
