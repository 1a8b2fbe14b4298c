// phubd refuses a bad Hello with an Error naming the mismatch and the fix, and stays up to
// serve the correct workers that follow.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <thread>

#include "phub/common/version.h"
#include "phub/transport/control_channel.h"
#include "phub/transport/socket_options.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<keys::TensorSpec> kTensors = {{"a", 10}, {"b", 3}};

client::PsClientOptions Options(const RunningPhubd& phubd) {
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 5000;
  return options;
}

// Sends a hand-made Hello and returns phubd's answer.
proto::ControlMessage RawHello(const RunningPhubd& phubd, const proto::Hello& hello) {
  boost::asio::io_context context;
  auto socket = transport::ConnectWithRetry(context, "127.0.0.1", phubd.port, 5000);
  EXPECT_TRUE(socket.ok()) << socket.status();
  // phubd speaks first: its Challenge (a Hello without a token needs no proof of one).
  auto challenge = transport::ReadControlMessage(*socket);
  EXPECT_TRUE(challenge.ok() && challenge->has_challenge()) << challenge.status();
  proto::ControlMessage message;
  *message.mutable_hello() = hello;
  EXPECT_TRUE(transport::WriteControlMessage(*socket, message).ok());
  auto reply = transport::ReadControlMessage(*socket);
  EXPECT_TRUE(reply.ok()) << reply.status();
  return reply.ok() ? *reply : proto::ControlMessage{};
}

proto::Hello ValidHello(std::uint32_t rank, std::uint32_t world) {
  proto::Hello hello;
  hello.set_protocol_version(kProtocolVersion);
  hello.set_rank(rank);
  hello.set_world_size(world);
  for (const auto& t : kTensors) {
    auto* spec = hello.add_tensors();
    spec->set_name(t.name);
    spec->set_elements(t.elements);
  }
  return hello;
}

// The job still works after the refusals: all ranks join, init and run one iteration.
void ExpectAJobRuns(const RunningPhubd& phubd, std::uint32_t world, const std::string& token = "") {
  auto options = Options(phubd);
  options.job_token = token;
  std::vector<std::uint32_t> ranks(world);
  for (std::uint32_t r = 0; r < world; ++r) ranks[r] = r;
  auto workers = ConnectWorkers(options, world, ranks, kTensors);
  std::vector<std::thread> threads;
  std::vector<Status> results(world);
  for (std::uint32_t r = 0; r < world; ++r) {
    ASSERT_TRUE(workers[r].status.ok()) << workers[r].status;
    threads.emplace_back([&, r] {
      results[r] = workers[r].client->Init();
      if (results[r].ok()) results[r] = RunIteration(workers[r], 1);
      if (results[r].ok()) results[r] = workers[r].client->Close();
    });
  }
  for (auto& t : threads) t.join();
  for (std::uint32_t r = 0; r < world; ++r) EXPECT_TRUE(results[r].ok()) << results[r];
}

TEST(PsAdmission, WrongTokenIsRefusedAndNamed) {
  TempDir dir;
  std::ofstream(dir.File("token")) << "s3cret\n";
  auto phubd = StartPhubd(dir, {"--max-world-size", "1", "--token-file", dir.File("token")});
  auto options = Options(phubd);
  options.job_token = "wrong";
  auto workers = ConnectWorkers(options, 1, {0}, kTensors);
  EXPECT_EQ(workers[0].status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(workers[0].status.message()), HasSubstr("token"));
  EXPECT_THAT(std::string(workers[0].status.message()), HasSubstr("--token-file"));
  EXPECT_TRUE(phubd.process.Running());
  ExpectAJobRuns(phubd, 1, "s3cret");
}

TEST(PsAdmission, WrongWorldSizeIsRefusedWithBothSizes) {
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-world-size", "2"});
  auto workers = ConnectWorkers(Options(phubd), 3, {0}, kTensors);
  std::string message(workers[0].status.message());
  EXPECT_THAT(message, HasSubstr("world size 3"));
  EXPECT_THAT(message, HasSubstr("--max-world-size 2"));
  EXPECT_TRUE(phubd.process.Running());
  ExpectAJobRuns(phubd, 2);
}

// --world-size, --max-world-size's old name, still caps the jobs, with a warning naming the new.
TEST(PsAdmission, DeprecatedWorldSizeFlagStillCapsJobs) {
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--world-size", "2"});
  EXPECT_THAT(ReadFile(phubd.log_path), HasSubstr("--world-size is deprecated"));
  auto workers = ConnectWorkers(Options(phubd), 3, {0}, kTensors);
  EXPECT_THAT(std::string(workers[0].status.message()), HasSubstr("--max-world-size 2"));
  ExpectAJobRuns(phubd, 2);
}

TEST(PsAdmission, WrongProtocolVersionIsRefused) {
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-world-size", "1"});
  proto::Hello hello = ValidHello(0, 1);
  hello.set_protocol_version(99);
  auto reply = RawHello(phubd, hello);
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), proto::Error::VERSION_MISMATCH);
  EXPECT_THAT(reply.error().message(), HasSubstr("99"));
  EXPECT_FALSE(reply.error().fix().empty());
  ExpectAJobRuns(phubd, 1);
}

TEST(PsAdmission, RankOutOfRangeIsRefused) {
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-world-size", "2"});
  auto reply = RawHello(phubd, ValidHello(5, 2));
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), proto::Error::BAD_RANK);
  EXPECT_THAT(reply.error().fix(), HasSubstr("0..1"));
  ExpectAJobRuns(phubd, 2);
}

TEST(PsAdmission, DuplicateRankAndMismatchedTensorTableAreRefused) {
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-world-size", "2"});
  // Rank 0 joins for real (it waits for the job to form).
  InProcessWorker first;
  std::thread rank0(
      [&] { first = std::move(ConnectWorkers(Options(phubd), 2, {0}, kTensors)[0]); });
  // Wait until phubd has rank 0, then make two bad attempts.
  for (int i = 0; i < 500 && ReadFile(phubd.log_path).find("rank 0 joined") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto duplicate = RawHello(phubd, ValidHello(0, 2));
  ASSERT_TRUE(duplicate.has_error());
  EXPECT_EQ(duplicate.error().code(), proto::Error::DUPLICATE_RANK);

  proto::Hello mismatched = ValidHello(1, 2);
  mismatched.mutable_tensors(1)->set_elements(4);
  auto table = RawHello(phubd, mismatched);
  ASSERT_TRUE(table.has_error());
  EXPECT_EQ(table.error().code(), proto::Error::TENSOR_TABLE_MISMATCH);
  EXPECT_THAT(table.error().message(), HasSubstr("tensor 1"));
  EXPECT_THAT(table.error().message(), HasSubstr("4 elements"));

  // The right rank 1 completes the job with the waiting rank 0.
  auto second = ConnectWorkers(Options(phubd), 2, {1}, kTensors);
  rank0.join();
  ASSERT_TRUE(first.status.ok()) << first.status;
  ASSERT_TRUE(second[0].status.ok()) << second[0].status;
  std::thread t0([&] { EXPECT_TRUE(first.client->Init().ok()); });
  EXPECT_TRUE(second[0].client->Init().ok());
  t0.join();
  EXPECT_EQ(second[0].weights[0], first.weights[0]);  // rank 1 received rank 0's weights
  EXPECT_TRUE(phubd.process.Running());
}

// phubd's own flags: a bad value exits non-zero with a message naming the flag.
TEST(PhubdFlags, BadValuesExitNonZeroNamingTheFlag) {
  TempDir dir;
  struct Case {
    std::vector<std::string> args;
    int code;
    std::string mentions;
  };
  const std::vector<Case> cases = {
      {{"--max-world-size", "2", "--chunk-bytes", "3"}, 1, "--chunk-bytes 3"},
      {{"--max-world-size", "2", "--optimizer", "rmsprop"}, 105, "rmsprop"},
      {{"--max-world-size", "2", "--optimizer", "sgd", "--lr", "-1"}, 1, "lr"},
      {{"--max-world-size", "0"}, 105, "--max-world-size"},
      {{"--world-size", "0"}, 105, "--world-size"},
      {{"--max-world-size", "2", "--token-file", "/nonexistent/token"}, 2, "/nonexistent/token"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {PhubdPath(), "--port", "0", "--log-level", "warn"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    const std::string log = dir.File("flags.log");
    std::remove(log.c_str());
    Process phubd = Process::Start(argv, log);
    auto code = phubd.Wait(std::chrono::seconds(10));
    ASSERT_TRUE(code.has_value()) << "phubd kept running with " << c.args.back();
    EXPECT_EQ(*code, c.code) << ReadFile(log);
    EXPECT_THAT(ReadFile(log), HasSubstr(c.mentions));
  }
}

TEST(PsAdmission, InitialWeightsFileOfTheWrongSizeIsReportedToEveryWorker) {
  TempDir dir;
  std::ofstream(dir.File("init.f32"), std::ios::binary) << "12345678";  // 2 floats; model has 13
  auto phubd = StartPhubd(dir, {"--max-world-size", "2", "--init-weights", dir.File("init.f32")});
  auto workers = ConnectWorkers(Options(phubd), 2, {0, 1}, kTensors);
  for (auto& w : workers) {
    EXPECT_EQ(w.status.code(), absl::StatusCode::kInvalidArgument) << w.status;
    EXPECT_THAT(std::string(w.status.message()), HasSubstr("8 bytes"));
    EXPECT_THAT(std::string(w.status.message()), HasSubstr("52"));
  }
  EXPECT_TRUE(phubd.process.Running());
}

}  // namespace
}  // namespace phub::testing
