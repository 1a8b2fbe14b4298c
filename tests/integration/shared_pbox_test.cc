// A shared PBox: one phubd, several jobs at once (docs/operations.md "Sharing a PBox"). Jobs
// running side by side end bitwise where each ends alone; a tenant without a job's token can
// neither join it, nor read or write its chunks, nor disturb it; a job that misbehaves (killed
// mid-iteration, flooding garbage) leaves the others' results unchanged; the memory budget and
// --max-jobs refuse a job up front, naming the flag, without touching the running ones.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "phub/transport/verbs/verbs_device.h"
#include "phub/transport/wire_header.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/support/forged_client.h"
#include "tests/support/free_port.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;

// A job of real worker processes (tests/integration/test_worker.cc).
struct JobSpec {
  std::string name;
  std::uint32_t world;
  std::string sizes;  // tensor sizes, floats
  std::uint64_t seed;
  int iterations = 6;
  std::string token = "";
};

struct RunningJob {
  JobSpec spec;
  std::vector<Process> workers;
};

std::string OutFile(const TempDir& dir, const std::string& run, const JobSpec& job,
                    std::uint32_t rank) {
  return dir.File(run + "-" + job.name + "-" + std::to_string(rank) + ".out");
}

RunningJob StartJob(const TempDir& dir, const RunningPhubd& phubd, const JobSpec& job,
                    const std::string& run, const std::vector<std::string>& extra = {}) {
  RunningJob running{job, {}};
  for (std::uint32_t r = 0; r < job.world; ++r) {
    std::vector<std::string> args = {TestWorkerPath(), "--port", std::to_string(phubd.port),
                                     "--rank", std::to_string(r), "--world",
                                     std::to_string(job.world), "--tensors", job.sizes,
                                     "--iters", std::to_string(job.iterations), "--seed",
                                     std::to_string(job.seed), "--job", job.name, "--out",
                                     OutFile(dir, run, job, r)};
    if (!job.token.empty()) {
      args.push_back("--token");
      args.push_back(job.token);
    }
    args.insert(args.end(), extra.begin(), extra.end());
    running.workers.push_back(
        Process::Start(args, dir.File(run + "-" + job.name + "-" + std::to_string(r) + ".log")));
  }
  return running;
}

// Every worker of the job exits 0 within `timeout`.
void ExpectJobSucceeds(RunningJob& job, const TempDir& dir, const std::string& run,
                       std::chrono::seconds timeout = std::chrono::seconds(60)) {
  for (std::uint32_t r = 0; r < job.workers.size(); ++r) {
    auto code = job.workers[r].Wait(timeout);
    ASSERT_TRUE(code.has_value()) << "job " << job.spec.name << " rank " << r << " hung";
    EXPECT_EQ(*code, 0) << "job " << job.spec.name << " rank " << r << ": "
                        << ReadFile(dir.File(run + "-" + job.spec.name + "-" +
                                             std::to_string(r) + ".log"));
  }
}

// The job's final weights in `run` are bitwise those of `reference` (and not empty).
void ExpectSameWeights(const TempDir& dir, const JobSpec& job, const std::string& run,
                       const std::string& reference) {
  for (std::uint32_t r = 0; r < job.world; ++r) {
    const std::string mine = ReadFile(OutFile(dir, run, job, r));
    const std::string alone = ReadFile(OutFile(dir, reference, job, r));
    ASSERT_FALSE(alone.empty()) << job.name << " rank " << r << " wrote no weights alone";
    EXPECT_TRUE(mine == alone) << "job " << job.name << " rank " << r << ": " << run
                               << " differs from " << reference << " (" << mine.size()
                               << " vs " << alone.size() << " bytes)";
  }
}

// Different models, world sizes, data and optimizer state per job: nothing may leak between.
const std::vector<JobSpec> kJobs = {
    {"alpha", 2, "5000,300,20000", 1},
    {"beta", 3, "7000,11", 2},
    {"gamma", 1, "12345", 3},
    {"delta", 2, "40000,5,999", 4},
};

// --nic-gbps: the jobs' sends go through each core's fair queue, paced while they share it
// (fair_send_queue.h): results must not depend on when a chunk's turn comes.
const std::vector<std::string> kPhubdFlags = {"--cores", "2", "--chunk-bytes", "4096",
                                              "--optimizer", "momentum", "--lr", "0.05",
                                              "--momentum", "0.9", "--nic-gbps", "1",
                                              "--job-weight", "beta=2"};

// (k jobs, transport): on verbs where there is an RDMA device (the soft-RoCE guest runs the
// *verbs* cases: tests/verbs/), where each job's shard memory is registered and unregistered
// on its own while the others' stay.
class ConcurrentJobs : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(ConcurrentJobs, EachEndsWithTheWeightsItHasAlone) {
  const auto [k, transport] = GetParam();
  if (transport == "verbs" && transport::verbs::ListDevices().empty()) {
    GTEST_SKIP() << "no RDMA device here: tests/verbs/run_verbs_tests.sh runs this in a QEMU "
                    "guest with soft-RoCE";
  }
  TempDir dir;
  std::vector<std::string> flags = kPhubdFlags;
  flags.insert(flags.end(), {"--transport", transport});
  auto phubd = StartPhubd(dir, flags);
  // Alone: one job at a time on the same phubd.
  for (int j = 0; j < k; ++j) {
    RunningJob job = StartJob(dir, phubd, kJobs[j], "alone");
    ExpectJobSucceeds(job, dir, "alone");
  }
  // Together, each iteration stretched so that all run at once (checked below). The alone
  // runs' ends are in the log first, so that none is taken for a shared run's.
  std::vector<std::string> ends;
  for (int j = 0; j < k; ++j) ends.push_back("job '" + kJobs[j].name + "' ended");
  const std::size_t log_before = AwaitLog(phubd.log_path, ends).size();
  std::vector<RunningJob> jobs;
  for (int j = 0; j < k; ++j) {
    jobs.push_back(StartJob(dir, phubd, kJobs[j], "shared", {"--step-delay-ms", "150"}));
  }
  for (auto& job : jobs) ExpectJobSucceeds(job, dir, "shared");
  for (int j = 0; j < k; ++j) ExpectSameWeights(dir, kJobs[j], "shared", "alone");
  EXPECT_TRUE(phubd.process.Running());
  // Every job of the shared run started before any ended: they did share phubd. phubd logs
  // a job's end once it has seen its workers' connections close, which may come after the
  // workers have exited: wait for the lines.
  const std::string log = AwaitLog(phubd.log_path, ends, std::chrono::seconds(30), log_before);
  std::size_t last_start = 0, first_end = std::string::npos;
  for (int j = 0; j < k; ++j) {
    const std::size_t started = log.find("job '" + kJobs[j].name + "' started");
    const std::size_t ended = log.find("job '" + kJobs[j].name + "' ended");
    ASSERT_NE(started, std::string::npos) << kJobs[j].name;
    ASSERT_NE(ended, std::string::npos) << kJobs[j].name;
    last_start = std::max(last_start, started);
    first_end = std::min(first_end, ended);
  }
  EXPECT_LT(last_start, first_end) << "the jobs did not overlap:\n" << log;
}

INSTANTIATE_TEST_SUITE_P(
    TwoAndFour, ConcurrentJobs,
    ::testing::Combine(::testing::Values(2, 4), ::testing::Values("tcp", "verbs")),
    [](const auto& info) {
      return "k" + std::to_string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
    });

// A hand-made Hello for `job`, sent on a connection of its own: phubd's answer.
proto::Hello HelloOf(const std::string& job, const std::string& token, std::uint32_t rank,
                     std::uint32_t world, const std::vector<keys::TensorSpec>& tensors) {
  proto::Hello hello = MakeHello(rank, world, tensors, token);
  hello.set_job(job);
  return hello;
}

// From `source` (a loopback address): failed Hellos from one address are answered ever later
// (refusal_pacer.h), so a test making many gives each its own.
proto::ControlMessage RawHello(std::uint16_t port, const proto::Hello& hello,
                               const std::string& source = "") {
  RawSocket socket = RawSocket::Connect(port, Millis(5000), source);
  EXPECT_TRUE(socket.connected());
  EXPECT_TRUE(socket.SendMessage(Wrap(hello)));
  proto::ControlMessage reply;
  EXPECT_EQ(socket.ReadMessage(reply, Millis(5000)), RawSocket::Read::kOk);
  return reply;
}

// Sends `bytes` to 127.0.0.1:port and reports whether the peer then closed the connection.
bool PeerClosesAfter(std::uint16_t port, const std::vector<std::byte>& bytes) {
  // A port already closed (its job ended while the flood goes on, on a loaded machine) costs a
  // quarter second, not the default five of retries.
  RawSocket socket = RawSocket::Connect(port, Millis(250));
  return socket.connected() && socket.Send(bytes) && socket.WaitClosed(Millis(5000));
}

void RunIterations(std::vector<InProcessWorker>& workers, std::uint64_t first,
                   std::uint64_t last) {
  std::vector<std::thread> threads;
  for (auto& w : workers) {
    threads.emplace_back([&w, first, last] {
      for (std::uint64_t it = first; it <= last; ++it) EXPECT_TRUE(RunIteration(w, it).ok());
    });
  }
  for (auto& t : threads) t.join();
}

TEST(SharedPbox, ATenantWithoutTheTokenCanNeitherJoinNorReachAnotherJob) {
  TempDir dir;
  std::filesystem::create_directory(dir.File("tokens"));
  std::ofstream(dir.File("tokens/alpha")) << "alpha-secret\n";
  std::ofstream(dir.File("tokens/beta")) << "beta-secret\n";
  auto phubd = StartPhubd(dir, {"--job-tokens", dir.File("tokens"), "--data-port-base", "auto",
                                "--optimizer", "sgd", "--lr", "0.5"});
  const std::uint16_t data_port = phubd.data_port_base;
  const auto tensors = TestTensors({3000, 7});
  client::PsClientOptions options;
  options.port = phubd.port;
  options.job = "beta";
  options.job_token = "beta-secret";
  auto beta = ConnectWorkers(options, 2, {0, 1}, tensors);
  for (auto& w : beta) ASSERT_TRUE(w.status.ok()) << w.status;
  std::thread init0([&] { EXPECT_TRUE(beta[0].client->Init().ok()); });
  ASSERT_TRUE(beta[1].client->Init().ok());
  init0.join();
  RunIterations(beta, 1, 1);

  // Forged Hellos for beta: a wrong token, alpha's token, none; a job with no token at all.
  // Each is refused BAD_TOKEN, says nothing of beta (not even that it runs), and a rank
  // "rejoining" with a forged Hello does not displace beta's member.
  for (const auto& [job, token] : std::vector<std::pair<std::string, std::string>>{
           {"beta", "guess"}, {"beta", "alpha-secret"}, {"beta", ""}, {"gamma", "x"},
           {"", "beta-secret"}}) {
    for (std::uint32_t rank : {0u, 1u}) {
      static int attempt = 0;
      proto::ControlMessage reply = RawHello(phubd.port, HelloOf(job, token, rank, 2, tensors),
                                             "127.0.2." + std::to_string(++attempt));
      ASSERT_TRUE(reply.has_error()) << job << "/" << token << ": " << reply.DebugString();
      EXPECT_EQ(reply.error().code(), proto::Error::BAD_TOKEN) << reply.error().message();
      EXPECT_THAT(reply.error().message(), ::testing::Not(HasSubstr("running")));
      EXPECT_THAT(reply.error().message(), ::testing::Not(HasSubstr("secret")));
    }
  }
  // The data plane: ATTACHes with guessed sessions, to every rank, and garbage: each closed.
  for (std::uint64_t session : {0ull, 1ull, 0xdeadbeefull, ~0ull}) {
    for (std::uint32_t rank : {0u, 1u}) {
      auto forged = transport::EncodeWireHeader({transport::Op::kAttach, rank, 0, session, 0});
      EXPECT_TRUE(PeerClosesAfter(data_port, std::vector<std::byte>(forged.begin(), forged.end())));
    }
  }
  // A PUSH without an ATTACH, aimed at beta's chunk 0 slot of rank 0.
  auto push = transport::EncodeWireHeader({transport::Op::kPush, 0, 0, 2, 4 * 3000});
  std::vector<std::byte> bytes(push.begin(), push.end());
  bytes.resize(bytes.size() + 4 * 3000, std::byte{0x7f});
  EXPECT_TRUE(PeerClosesAfter(data_port, bytes));

  // Beta goes on, untouched: its weights are exactly the float64 reference.
  std::vector<float> start(beta[0].weights[0].size());
  for (std::size_t i = 0; i < start.size(); ++i) start[i] = TestValue(1, kInitRank, 0, 0, i);
  RunIterations(beta, 2, 3);
  for (std::size_t i = 0; i < start.size(); i += 37) {
    double expected = start[i];
    for (std::uint64_t it = 1; it <= 3; ++it) {
      expected -= 0.5 * (static_cast<double>(TestValue(1, 0, it, 0, i)) +
                         static_cast<double>(TestValue(1, 1, it, 0, i))) / 2.0;
    }
    EXPECT_NEAR(beta[1].weights[0][i], expected, 1e-5) << "element " << i;
  }
  EXPECT_EQ(beta[0].weights, beta[1].weights);

  // Alpha, with its own token, trains beside it.
  options.job = "alpha";
  options.job_token = "alpha-secret";
  auto alpha = ConnectWorkers(options, 1, {0}, tensors, /*seed=*/9);
  ASSERT_TRUE(alpha[0].status.ok()) << alpha[0].status;
  ASSERT_TRUE(alpha[0].client->Init().ok());
  RunIterations(alpha, 1, 2);
  for (auto& w : beta) EXPECT_TRUE(w.client->Close().ok());
  EXPECT_TRUE(alpha[0].client->Close().ok());
  EXPECT_TRUE(phubd.process.Running());
  EXPECT_THAT(ReadFile(phubd.log_path), HasSubstr("session of no job"));
}

TEST(SharedPbox, AJobKilledMidIterationAndFloodingDoesNotChangeAnothersResult) {
  TempDir dir;
  std::vector<std::string> flags = kPhubdFlags;
  flags.insert(flags.end(), {"--data-port-base", "auto", "--rejoin-timeout-ms", "0"});
  auto phubd = StartPhubd(dir, flags);
  const std::uint16_t data_port = phubd.data_port_base;
  JobSpec b = kJobs[0];
  b.iterations = 12;
  RunningJob alone = StartJob(dir, phubd, b, "alone");
  ExpectJobSucceeds(alone, dir, "alone");
  // Its end logged (it may come after its workers exit), so that it is not taken for B's below.
  const std::size_t log_before = AwaitLog(phubd.log_path, {"job 'alpha' ended"}).size();

  // A: rank 1 SIGKILLs itself half-way through iteration 3, rank 0 is left in a stalled job.
  JobSpec a{"misbehaving", 2, "30000,17", 5, 10};
  // B's iterations stretched so that A dies, and the flood comes, while B trains.
  RunningJob shared_b = StartJob(dir, phubd, b, "shared", {"--step-delay-ms", "40"});
  RunningJob a_job{a, {}};
  for (std::uint32_t r = 0; r < 2; ++r) {
    std::vector<std::string> args = {TestWorkerPath(), "--port", std::to_string(phubd.port),
                                     "--rank", std::to_string(r), "--world", "2", "--tensors",
                                     a.sizes, "--iters", "10", "--job", a.name,
                                     "--step-delay-ms", "20"};
    if (r == 1) args.insert(args.end(), {"--die-at", "3"});
    a_job.workers.push_back(Process::Start(args, dir.File("a-" + std::to_string(r) + ".log")));
  }
  // And a flood of garbage at every port while both run.
  std::thread flood([&] {
    for (int i = 0; i < 50; ++i) {
      PeerClosesAfter(data_port, std::vector<std::byte>(64, std::byte{0xAB}));
      PeerClosesAfter(data_port + 1, std::vector<std::byte>(64, std::byte{0xCD}));
      PeerClosesAfter(phubd.port, std::vector<std::byte>(64, std::byte{0xEF}));
    }
  });
  ExpectJobSucceeds(shared_b, dir, "shared");
  flood.join();
  auto killed = a_job.workers[1].Wait(std::chrono::seconds(60));
  ASSERT_TRUE(killed.has_value());
  EXPECT_EQ(*killed, 128 + SIGKILL);
  auto survivor = a_job.workers[0].Wait(std::chrono::seconds(60));
  ASSERT_TRUE(survivor.has_value()) << "A's survivor hangs";
  EXPECT_NE(*survivor, 0);
  EXPECT_THAT(ReadFile(dir.File("a-0.log")), HasSubstr("stalled"));
  ExpectSameWeights(dir, b, "shared", "alone");
  EXPECT_TRUE(phubd.process.Running());
  const std::string log =
      AwaitLog(phubd.log_path, {"job 'misbehaving' stalled", "job 'alpha' ended"},
               std::chrono::seconds(30), log_before);
  EXPECT_THAT(log, HasSubstr("job 'misbehaving' stalled"));
  // A stalled while B ran: its stall comes before B's end.
  EXPECT_LT(log.find("job 'misbehaving' stalled"), log.rfind("job 'alpha' ended"));
}

TEST(SharedPbox, AJobOverTheMemoryBudgetIsRefusedNamingItAndTheRunningJobGoesOn) {
  TempDir dir;
  // One job of 2 workers and 10000 floats in 4096-byte chunks is charged
  // (40000 + 10 * 256) * (2 + 3) = 212800 bytes: one fits in 300000, two do not.
  auto phubd = StartPhubd(dir, {"--chunk-bytes", "4096", "--memory-budget-bytes", "300000",
                                "--optimizer", "sgd", "--lr", "0.1"});
  const auto tensors = TestTensors({10000});
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 5000;
  options.job = "first";
  auto first = ConnectWorkers(options, 2, {0, 1}, tensors);
  for (auto& w : first) ASSERT_TRUE(w.status.ok()) << w.status;
  std::thread init0([&] { EXPECT_TRUE(first[0].client->Init().ok()); });
  ASSERT_TRUE(first[1].client->Init().ok());
  init0.join();

  // The job is charged when it forms (its last worker's Hello): refused then, every member.
  RawSocket rank0 = RawSocket::Connect(phubd.port);
  ASSERT_TRUE(rank0.SendMessage(Wrap(HelloOf("second", "", 0, 2, tensors))));
  proto::ControlMessage reply = RawHello(phubd.port, HelloOf("second", "", 1, 2, tensors));
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), proto::Error::RESOURCE_EXHAUSTED);
  EXPECT_THAT(reply.error().message(), HasSubstr("212800"));
  EXPECT_THAT(reply.error().message(), HasSubstr("--memory-budget-bytes"));
  EXPECT_THAT(reply.error().message(), HasSubstr("300000"));
  proto::ControlMessage reply0;
  ASSERT_EQ(rank0.ReadMessage(reply0, Millis(5000)), RawSocket::Read::kOk);
  EXPECT_EQ(reply0.error().code(), proto::Error::RESOURCE_EXHAUSTED);
  // A small job still fits beside it: 1000 floats, 1 worker: (4000 + 256) * 4 = 17024.
  options.job = "small";
  auto small = ConnectWorkers(options, 1, {0}, TestTensors({1000}));
  ASSERT_TRUE(small[0].status.ok()) << small[0].status;
  ASSERT_TRUE(small[0].client->Init().ok());
  RunIterations(small, 1, 2);
  EXPECT_TRUE(small[0].client->Close().ok());

  RunIterations(first, 1, 3);  // the running job lost nothing
  for (auto& w : first) EXPECT_TRUE(w.client->Close().ok());
  // Once it has ended its memory is free: the refused job now forms.
  options.job = "second";
  std::vector<InProcessWorker> second;
  for (int attempt = 0; attempt < 50; ++attempt) {
    second = ConnectWorkers(options, 2, {0, 1}, tensors);
    if (second[0].status.ok() && second[1].status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the end is asynchronous
  }
  for (auto& w : second) ASSERT_TRUE(w.status.ok()) << w.status;
  for (auto& w : second) EXPECT_TRUE(w.client->Close().ok());
  EXPECT_THAT(ReadFile(phubd.log_path), HasSubstr("--memory-budget-bytes"));
}

TEST(SharedPbox, MaxJobsAndBadJobNamesAreRefusedNamingTheRule) {
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-jobs", "1", "--form-timeout-ms", "60000"});
  const auto tensors = TestTensors({100});
  // Job "one" forms (1 of 2 joined) and holds the only place.
  RawSocket member = RawSocket::Connect(phubd.port);
  ASSERT_TRUE(member.connected());
  ASSERT_TRUE(member.SendMessage(Wrap(HelloOf("one", "", 0, 2, tensors))));
  proto::ControlMessage reply;
  for (int attempt = 0; attempt < 50; ++attempt) {
    reply = RawHello(phubd.port, HelloOf("two", "", 0, 1, tensors));
    if (reply.has_error() && reply.error().code() == proto::Error::LIMIT_EXCEEDED) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), proto::Error::LIMIT_EXCEEDED);
  EXPECT_THAT(reply.error().message(), HasSubstr("--max-jobs 1"));
  reply = RawHello(phubd.port, HelloOf("../../etc", "", 0, 1, tensors));
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().code(), proto::Error::BAD_REQUEST);
  EXPECT_THAT(reply.error().message(), HasSubstr("[A-Za-z0-9._-]"));
  // The forming job's member leaves: its place is free, and job "two" forms and runs.
  member.Close();
  client::PsClientOptions options;
  options.port = phubd.port;
  options.job = "two";
  std::vector<InProcessWorker> two;
  for (int attempt = 0; attempt < 50; ++attempt) {
    two = ConnectWorkers(options, 1, {0}, tensors);
    if (two[0].status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the leave is asynchronous
  }
  ASSERT_TRUE(two[0].status.ok()) << two[0].status;
  EXPECT_TRUE(two[0].client->Close().ok());
}

TEST(SharedPbox, ARefusedFirstHelloHoldsNoJobPlaceNorMemory) {
  // A Hello that passes the token check but is refused by its job (a bad protocol version, a
  // rank out of range) must not leave an empty job holding the name, the memory charge and
  // the only --max-jobs place.
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-jobs", "1"});
  const auto tensors = TestTensors({100});
  for (int k = 0; k < 5; ++k) {
    proto::Hello bad = HelloOf("ghost" + std::to_string(k), "", 0, 2, tensors);
    if (k % 2 == 0) {
      bad.set_protocol_version(bad.protocol_version() + 7);
    } else {
      bad.set_rank(5);
    }
    proto::ControlMessage reply = RawHello(phubd.port, bad);
    ASSERT_TRUE(reply.has_error());
    EXPECT_NE(reply.error().code(), proto::Error::LIMIT_EXCEEDED) << reply.error().message();
  }
  client::PsClientOptions options;
  options.port = phubd.port;
  options.job = "real";
  options.connect_timeout_ms = 5000;
  std::vector<InProcessWorker> real;
  for (int attempt = 0; attempt < 50; ++attempt) {  // an ended job's name goes a moment later
    real = ConnectWorkers(options, 1, {0}, tensors);
    if (real[0].status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(real[0].status.ok()) << real[0].status;
  EXPECT_TRUE(real[0].client->Close().ok());
}

TEST(SharedPbox, AJobWaitingForARejoinWhoseLastMemberLeavesStillEnds) {
  // Rank 0 dies mid-iteration 2 (the job waits up to 1 s for it to rejoin); rank 1 pushes its
  // iteration 2 and says Goodbye. Nobody is live: the job must still end when the rejoin
  // deadline passes, freeing its place (--max-jobs 1) for the next job — the Goodbye's leave
  // deadline (--leave-timeout-ms, 300 s) must not replace the rejoin deadline.
  TempDir dir;
  auto phubd = StartPhubd(dir, {"--max-jobs", "1", "--rejoin-timeout-ms", "1000"});
  const std::string sizes = "5000,300";
  Process dying = Process::Start({TestWorkerPath(), "--port", std::to_string(phubd.port),
                                  "--rank", "0", "--world", "2", "--tensors", sizes, "--iters",
                                  "5", "--die-at", "2"},
                                 dir.File("dying.log"));
  client::PsClientOptions options;
  options.port = phubd.port;
  auto workers = ConnectWorkers(options, 2, {1}, TestTensors(ParseSizes(sizes)));
  ASSERT_TRUE(workers[0].status.ok()) << workers[0].status;
  ASSERT_TRUE(workers[0].client->Init().ok());
  ASSERT_TRUE(RunIteration(workers[0], 1).ok());
  auto code = dying.Wait(std::chrono::seconds(30));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 128 + SIGKILL);
  // phubd has seen the loss once its log says it waits for the rejoin.
  for (int i = 0; i < 200 && ReadFile(phubd.log_path).find("to say Hello again") ==
                                 std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  // Rank 1 pushes all of iteration 2 (so no chunk waits for its copy: its Goodbye is not a
  // loss that stalls the job) and says Goodbye: the last live member leaves a job that waits.
  InProcessWorker& w = workers[0];
  for (std::uint32_t t = 0; t < w.grads.size(); ++t) {
    for (std::uint64_t i = 0; i < w.grads[t].size(); ++i) w.grads[t][i] = TestValue(1, 1, 2, t, i);
    ASSERT_TRUE(w.client->Push(t, w.grads[t]).ok());
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the pushes are in
  EXPECT_TRUE(w.client->Close().ok());
  options.job = "next";
  options.connect_timeout_ms = 2000;
  std::vector<InProcessWorker> next;
  for (int attempt = 0; attempt < 30; ++attempt) {  // the rejoin deadline is 1 s
    next = ConnectWorkers(options, 1, {0}, TestTensors({100}));
    if (next[0].status.ok()) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  ASSERT_TRUE(next[0].status.ok()) << "the abandoned job still holds phubd: " << next[0].status
                                   << "\n" << ReadFile(phubd.log_path);
  EXPECT_TRUE(next[0].client->Close().ok());
  EXPECT_THAT(ReadFile(phubd.log_path), HasSubstr("did not rejoin"));
}

}  // namespace
}  // namespace phub::testing
