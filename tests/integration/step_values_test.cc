// Hyper-parameters per iteration through a real phubd (docs/design.md "Hyper-parameters per
// iteration"): workers that give each iteration's values (PsClient::StepWith) get weights
// stepped with exactly those, against a float64 reference over a warm-up and a cosine decay;
// ranks that disagree stall the job naming both; what phubd refuses and what the client refuses
// is named; a job resumed from a checkpoint tells its workers the values it stepped last.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <thread>

#include "phub/common/version.h"
#include "phub/server/checkpoint/checkpoint_file.h"
#include "phub/transport/control_channel.h"
#include "phub/transport/socket_options.h"
#include "tests/integration/in_process_worker.h"
#include "tests/integration/phubd_launcher.h"
#include "tests/reference/optimizer_reference.h"

namespace phub::testing {
namespace {

using ::testing::HasSubstr;

const std::vector<std::uint64_t> kSizes = {300, 17};
constexpr std::uint64_t kSeed = 3;

client::PsClientOptions Scheduled(const RunningPhubd& phubd) {
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 5000;
  options.optimizer = kernels::OptimizerConfig{
      .kind = kernels::OptimizerKind::kMomentum, .lr = 0.1f, .momentum = 0.9f};
  options.per_iteration_values = true;
  return options;
}

// A warm-up of 5 iterations from lr 0, then a cosine decay to 0 over the rest, as torch's
// LinearLR + CosineAnnealingLR would give; weight decay switched on halfway, momentum lowered
// for the last quarter. Written here from the formulas, in double, rounded once to float.
kernels::StepValues ValuesAt(std::uint64_t iteration, std::uint64_t total) {
  const double base = 0.05, warm = 5;
  const double t = static_cast<double>(iteration - 1);
  const double lr = t < warm ? base * t / warm
                             : base * 0.5 *
                                   (1 + std::cos(std::numbers::pi * (t - warm) / (total - warm)));
  return {.lr = static_cast<float>(lr),
          .momentum = iteration > total * 3 / 4 ? 0.5f : 0.9f,
          .weight_decay = iteration > total / 2 ? 0.01f : 0.0f};
}

// Every worker, on its own thread: StepWith then push every tensor (last first, as backward
// does), then wait, for iterations first..last.
std::vector<Status> Train(std::vector<InProcessWorker>& workers, std::uint64_t first,
                          std::uint64_t last, std::uint64_t total,
                          const std::function<kernels::StepValues(std::uint32_t, std::uint64_t)>&
                              values_of = nullptr) {
  std::vector<Status> results(workers.size());
  std::vector<std::thread> threads;
  for (std::size_t k = 0; k < workers.size(); ++k) {
    threads.emplace_back([&, k] {
      InProcessWorker& w = workers[k];
      for (std::uint64_t it = first; it <= last && results[k].ok(); ++it) {
        const kernels::StepValues values =
            values_of ? values_of(w.client->rank(), it) : ValuesAt(it, total);
        results[k] = w.client->StepWith(values);
        if (results[k].ok()) results[k] = RunIteration(w, it, kSeed);
      }
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

// The reference: the mean of the workers' TestValue gradients, then momentum SGD with weight
// decay, each iteration with its own values, in float64. Tolerance: 60 float32 steps on values
// of order 1 leave a few 1e-6; 1e-4 relative (1e-5 floor) is far above that, and far below what
// stepping any iteration with another's values moves the weights (the lr differs by >= 1e-3
// between neighbours; the first values held throughout end > 1e-2 away).
//
// With several I/O threads (PsClientOptions::io_threads) a client's pushes leave on other
// threads than its StepWith and may reach phubd before the values: the same reference holds.
class StepValuesIoThreadsTest : public ::testing::TestWithParam<int> {};

TEST_P(StepValuesIoThreadsTest, TwoWorkersFollowAScheduleLikeAFloat64Reference) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "3", "--chunk-bytes", "256"});
  const auto tensors = TestTensors(kSizes);
  client::PsClientOptions options = Scheduled(phubd);
  options.io_threads = GetParam();
  auto workers = ConnectWorkers(options, 2, {0, 1}, tensors, kSeed);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  std::vector<std::thread> inits;
  for (auto& w : workers) inits.emplace_back([&w] { w.status = w.client->Init(); });
  for (auto& t : inits) t.join();
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;

  constexpr std::uint64_t kIterations = 60;
  for (const Status& s : Train(workers, 1, kIterations, kIterations)) ASSERT_TRUE(s.ok()) << s;

  for (std::uint32_t t = 0; t < kSizes.size(); ++t) {
    std::vector<double> w(kSizes[t]), v, s;
    for (std::uint64_t i = 0; i < kSizes[t]; ++i) w[i] = TestValue(kSeed, kInitRank, 0, t, i);
    for (std::uint64_t it = 1; it <= kIterations; ++it) {
      const kernels::StepValues values = ValuesAt(it, kIterations);
      const RefConfig config{.kind = RefOptimizer::kMomentum,
                             .lr = values.lr,
                             .momentum = values.momentum,
                             .weight_decay = values.weight_decay};
      std::vector<std::vector<double>> grads(2, std::vector<double>(kSizes[t]));
      for (std::uint32_t r = 0; r < 2; ++r) {
        for (std::uint64_t i = 0; i < kSizes[t]; ++i) grads[r][i] = TestValue(kSeed, r, it, t, i);
      }
      RefStep(config, grads, w, v, s, it);
    }
    for (const InProcessWorker& worker : workers) {
      for (std::uint64_t i = 0; i < kSizes[t]; ++i) {
        ASSERT_LE(std::abs(worker.weights[t][i] - w[i]), 1e-5 + 1e-4 * std::abs(w[i]))
            << "tensor " << t << "[" << i << "]: got " << worker.weights[t][i]
            << ", reference " << w[i];
      }
    }
  }
  for (auto& w : workers) EXPECT_TRUE(w.client->Close().ok());
}

INSTANTIATE_TEST_SUITE_P(IoThreads, StepValuesIoThreadsTest, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return std::to_string(info.param) + "IoThreads";
                         });

TEST(StepValuesTest, RanksThatDisagreeStallTheJobNamingBothValues) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "1"});
  auto workers = ConnectWorkers(Scheduled(phubd), 2, {0, 1}, TestTensors(kSizes), kSeed);
  for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
  std::vector<std::thread> inits;
  for (auto& w : workers) inits.emplace_back([&w] { w.status = w.client->Init(); });
  for (auto& t : inits) t.join();
  const auto results = Train(workers, 1, 3, 3, [](std::uint32_t rank, std::uint64_t) {
    return kernels::StepValues{.lr = rank == 0 ? 0.1f : 0.2f, .momentum = 0.9f};
  });
  for (const Status& s : results) {
    ASSERT_FALSE(s.ok());
    EXPECT_THAT(s.message(), HasSubstr("disagree on iteration 1's hyper-parameters"));
    EXPECT_THAT(s.message(), HasSubstr("lr=0.1, momentum=0.9"));
    EXPECT_THAT(s.message(), HasSubstr("lr=0.2, momentum=0.9"));
  }
}

// The client refuses what would only fail later: a push of an iteration without its values,
// values given twice for one iteration, values in a job of fixed ones, values the optimizer
// refuses; the job goes on.
TEST(StepValuesTest, TheClientRefusesPushesWithoutValuesAndValuesTwice) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "1"});
  auto workers = ConnectWorkers(Scheduled(phubd), 1, {0}, TestTensors(kSizes), kSeed);
  ASSERT_TRUE(workers[0].status.ok()) << workers[0].status;
  client::PsClient& client = *workers[0].client;
  ASSERT_TRUE(client.Init().ok());
  Status s = client.Push(0, workers[0].grads[0]);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("call StepWith once before each iteration's first Push"));
  s = client.StepWith({.lr = -0.1f});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  ASSERT_TRUE(client.StepWith({.lr = 0.1f}).ok());
  s = client.StepWith({.lr = 0.1f});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("StepWith twice before iteration 1's first Push"));
  ASSERT_TRUE(RunIteration(workers[0], 1, kSeed).ok());
  ASSERT_TRUE(client.StepWith({.lr = 0.05f}).ok());
  ASSERT_TRUE(RunIteration(workers[0], 2, kSeed).ok());
  EXPECT_TRUE(client.Close().ok());

  client::PsClientOptions fixed = Scheduled(phubd);
  fixed.per_iteration_values = false;
  auto plain = ConnectWorkers(fixed, 1, {0}, TestTensors(kSizes), kSeed);
  ASSERT_TRUE(plain[0].status.ok()) << plain[0].status;
  s = plain[0].client->StepWith({.lr = 0.1f});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("per_iteration_values"));
}

// phubd's own checks of a StepValues message (a client other than PsClient): one in a job of
// fixed values, and one for another iteration than the rank's next, are refused naming why.
TEST(StepValuesTest, PhubdRefusesValuesOutOfTurnOrInAJobOfFixedOnes) {
  TempDir dir;
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "1"});
  for (const bool scheduled : {false, true}) {
    SCOPED_TRACE(scheduled ? "a job with a schedule" : "a job of fixed values");
    boost::asio::io_context context;
    auto socket = transport::ConnectWithRetry(context, "127.0.0.1", phubd.port, 5000);
    ASSERT_TRUE(socket.ok()) << socket.status();
    ASSERT_TRUE(transport::ReadControlMessage(*socket).ok());  // the Challenge
    proto::ControlMessage message;
    proto::Hello& hello = *message.mutable_hello();
    hello.set_protocol_version(kProtocolVersion);
    hello.set_world_size(1);
    hello.set_job(scheduled ? "scheduled" : "fixed");
    hello.set_per_iteration_values(scheduled);
    hello.mutable_optimizer()->set_kind("sgd");
    hello.mutable_optimizer()->set_lr(0.1f);
    auto* tensor = hello.add_tensors();
    tensor->set_name("w");
    tensor->set_elements(10);
    ASSERT_TRUE(transport::WriteControlMessage(*socket, message).ok());
    auto welcome = transport::ReadControlMessage(*socket);
    ASSERT_TRUE(welcome.ok() && welcome->has_welcome()) << welcome.status();
    EXPECT_EQ(welcome->welcome().per_iteration_values(), scheduled);
    proto::ControlMessage values;
    values.mutable_step_values()->set_iteration(scheduled ? 5 : 1);
    values.mutable_step_values()->set_lr(0.1f);
    ASSERT_TRUE(transport::WriteControlMessage(*socket, values).ok());
    StatusOr<proto::ControlMessage> reply;
    do {
      reply = transport::ReadControlMessage(*socket);
    } while (reply.ok() && reply->has_heartbeat());
    ASSERT_TRUE(reply.ok() && reply->has_error()) << reply.status();
    EXPECT_EQ(reply->error().code(), proto::Error::BAD_REQUEST);
    EXPECT_THAT(reply->error().message(),
                HasSubstr(scheduled ? "rank 0 sent hyper-parameters for iteration 5; its next "
                                      "are iteration 1's"
                                    : "its job steps with fixed ones"));
  }
}

// A job checkpointed with a schedule and resumed by a restarted phubd: the checkpoint holds the
// values of its iteration, and the resumed workers' Welcome gives them (PsClient::resume_values),
// so a schedule can carry on from where it was.
TEST(StepValuesTest, AResumedJobTellsItsWorkersTheValuesItSteppedLast) {
  TempDir dir;
  const std::string ckpt = dir.File("ckpt");
  constexpr std::uint64_t kIterations = 8, kTotal = 20;
  {
    RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "256",
                                          "--checkpoint-dir", ckpt, "--checkpoint-every", "4"});
    auto workers = ConnectWorkers(Scheduled(phubd), 2, {0, 1}, TestTensors(kSizes), kSeed);
    for (auto& w : workers) ASSERT_TRUE(w.status.ok()) << w.status;
    std::vector<std::thread> inits;
    for (auto& w : workers) inits.emplace_back([&w] { w.status = w.client->Init(); });
    for (auto& t : inits) t.join();
    for (const Status& s : Train(workers, 1, kIterations, kTotal)) ASSERT_TRUE(s.ok()) << s;
    StatusOr<server::LoadedCheckpoint> loaded;
    ASSERT_TRUE(WaitFor(
        [&] {
          loaded = server::LoadNewestCheckpoint(ckpt);
          return loaded.ok() && loaded->snapshot.chunks[0].iteration == kIterations;
        },
        std::chrono::milliseconds(20000)));
    EXPECT_EQ(kernels::ValuesOf(loaded->snapshot.optimizer), ValuesAt(kIterations, kTotal));
    for (auto& w : workers) EXPECT_TRUE(w.client->Close().ok());
  }
  RunningPhubd phubd = StartPhubd(dir, {"--cores", "2", "--chunk-bytes", "256", "--resume", ckpt});
  auto workers = ConnectWorkers(Scheduled(phubd), 2, {0, 1}, TestTensors(kSizes), kSeed);
  for (auto& w : workers) {
    ASSERT_TRUE(w.status.ok()) << w.status;
    EXPECT_TRUE(w.client->resumed());
    EXPECT_EQ(w.client->resume_iteration(), kIterations);
    ASSERT_TRUE(w.client->resume_values().has_value());
    EXPECT_EQ(*w.client->resume_values(), ValuesAt(kIterations, kTotal));
  }
  std::vector<std::thread> inits;
  for (auto& w : workers) inits.emplace_back([&w] { w.status = w.client->Init(); });
  for (auto& t : inits) t.join();
  for (const Status& s : Train(workers, kIterations + 1, kIterations + 2, kTotal)) {
    EXPECT_TRUE(s.ok()) << s;
  }
}

}  // namespace
}  // namespace phub::testing
