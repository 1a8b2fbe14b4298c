#include "tests/integration/hostile_fixture.h"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <future>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"

namespace phub::testing {

namespace {

using Clock = std::chrono::steady_clock;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr std::uint64_t kAddressSpaceCap = std::uint64_t{4} << 30;

std::string LogTail(const RunningPhubd& phubd) {
  const std::string log = ReadFile(phubd.log_path);
  return log.size() <= 2048 ? log : "..." + log.substr(log.size() - 2048);
}

std::string MiB(std::uint64_t bytes) { return absl::StrCat(bytes >> 20, " MiB"); }

}  // namespace

RunningPhubd StartHostilePhubd(const TempDir& dir, const std::vector<std::string>& extra,
                               PhubdRlimits limits) {
  // A member the attacks drop stalls the job at once, as they assert; waiting for it to rejoin
  // is recovery_test.cc's subject.
  std::vector<std::string> args = {"--max-world-size", "2", "--optimizer", "sgd", "--lr", "0.5",
                                   "--rejoin-timeout-ms", "0"};
  if (std::find(extra.begin(), extra.end(), "--chunk-bytes") == extra.end()) {
    args.insert(args.end(), {"--chunk-bytes", "64"});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  if (!kSanitized && limits.address_space_bytes == 0) limits.address_space_bytes = kAddressSpaceCap;
  return StartPhubd(dir, args, limits);
}

struct BackgroundTask::State {
  std::promise<void> done;
  std::future<void> finished = done.get_future();
};

BackgroundTask::BackgroundTask(RunningPhubd& phubd, std::function<void()> body)
    : phubd_(phubd),
      state_(std::make_shared<State>()),
      thread_([state = state_, body = std::move(body)] {
        body();
        state->done.set_value();
      }) {}

BackgroundTask::~BackgroundTask() { Finish(std::chrono::seconds(5)); }

bool BackgroundTask::Finish(std::chrono::milliseconds timeout) {
  if (!thread_.joinable()) return true;
  const bool in_time = state_->finished.wait_for(timeout) == std::future_status::ready;
  if (!in_time) phubd_.process.Kill(SIGKILL);  // every blocked PsClient call now sees EOF
  thread_.join();
  return in_time;
}

bool RunBounded(RunningPhubd& phubd, std::chrono::milliseconds timeout,
                const std::function<void()>& body) {
  BackgroundTask task(phubd, body);
  return task.Finish(timeout);
}

::testing::AssertionResult AJobCompletes(RunningPhubd& phubd, std::uint32_t world,
                                         std::chrono::milliseconds timeout) {
  if (!phubd.process.Running()) return ::testing::AssertionFailure() << "phubd is not running";
  std::vector<InProcessWorker> workers(world);
  std::vector<Status> outcome(world);
  std::vector<int> refusals(world, 0);
  std::vector<std::string> last_refusal(world);
  const auto connect_deadline = Clock::now() + timeout / 2;
  bool in_time = RunBounded(phubd, timeout, [&] {
    std::vector<std::thread> threads;
    for (std::uint32_t r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        client::PsClientOptions options;
        options.port = phubd.port;
        options.connect_timeout_ms = 2000;
        // phubd may still be ending the job before (a close in flight), or refuse a rank
        // another attempt holds for a moment: retry until the deadline, keeping the reasons.
        while (true) {
          std::vector<InProcessWorker> one = ConnectWorkers(options, world, {r}, kHostileModel);
          if (one[0].status.ok()) {
            workers[r] = std::move(one[0]);
            break;
          }
          ++refusals[r];
          last_refusal[r] = std::string(one[0].status.message());
          if (Clock::now() >= connect_deadline) {
            outcome[r] = one[0].status;
            return;
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        outcome[r] = workers[r].client->Init();
        for (std::uint64_t it = 1; it <= 2 && outcome[r].ok(); ++it) {
          outcome[r] = RunIteration(workers[r], it);
        }
        if (outcome[r].ok()) outcome[r] = workers[r].client->Close();
      });
    }
    for (auto& t : threads) t.join();
  });
  std::string retried;
  for (std::uint32_t r = 0; r < world; ++r) {
    if (refusals[r] > 0) {
      absl::StrAppend(&retried, "\n  rank ", r, ": ", refusals[r],
                      " failed attempts, the last: ", last_refusal[r]);
    }
  }
  if (retried.empty()) retried = " none failed";
  if (!in_time) {
    return ::testing::AssertionFailure()
           << "the job did not complete within " << timeout.count()
           << " ms (phubd was killed to end it); connect attempts:" << retried;
  }
  for (std::uint32_t r = 0; r < world; ++r) {
    if (!outcome[r].ok()) {
      return ::testing::AssertionFailure()
             << "rank " << r << " failed: " << outcome[r] << "; connect attempts:" << retried;
    }
  }
  // Float64 reference: SGD on the mean of the workers' gradients, from rank 0's weights.
  for (std::uint32_t t = 0; t < kHostileModel.size(); ++t) {
    for (std::uint64_t i = 0; i < kHostileModel[t].elements; ++i) {
      double expected = TestValue(1, kInitRank, 0, t, i);
      for (std::uint64_t it = 1; it <= 2; ++it) {
        double sum = 0;
        for (std::uint32_t r = 0; r < world; ++r) sum += TestValue(1, r, it, t, i);
        expected -= kHostileLr * sum / world;
      }
      for (std::uint32_t r = 0; r < world; ++r) {
        const double got = workers[r].weights[t][i];
        if (std::abs(got - expected) > 1e-5) {
          return ::testing::AssertionFailure()
                 << "rank " << r << " tensor " << t << " element " << i << ": " << got
                 << ", the reference says " << expected;
        }
      }
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult StaysSmall(RunningPhubd& phubd) {
  if (!phubd.process.Running()) {
    return ::testing::AssertionFailure()
           << "phubd is gone (exit "
           << phubd.process.Wait(std::chrono::milliseconds(0)).value_or(-1) << "); its log ends:\n"
           << LogTail(phubd);
  }
  const auto deadline = Clock::now() + std::chrono::seconds(3);
  std::optional<ProcessStats> stats;
  while (true) {
    stats = ReadProcessStats(phubd.process.pid());
    if (!stats) return ::testing::AssertionFailure() << "cannot read /proc of phubd";
    if (stats->open_fds < kMaxOpenFds || Clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (stats->open_fds >= kMaxOpenFds) {
    return ::testing::AssertionFailure()
           << "phubd holds " << stats->open_fds
           << " descriptors 3 s after the attackers left; the bound is " << kMaxOpenFds;
  }
  if (stats->rss_bytes >= kMaxRssBytes || stats->peak_rss_bytes >= kMaxRssBytes) {
    return ::testing::AssertionFailure()
           << "phubd's resident memory is " << MiB(stats->rss_bytes) << " (peak "
           << MiB(stats->peak_rss_bytes) << "); the bound is " << MiB(kMaxRssBytes);
  }
  return ::testing::AssertionSuccess();
}

void ExpectServesAJobAndStaysSmall(RunningPhubd& phubd) {
  EXPECT_TRUE(AJobCompletes(phubd));
  EXPECT_TRUE(StaysSmall(phubd));
}

bool FormForgedJob(RunningPhubd& phubd, std::uint32_t forged_rank, ForgedJob& job,
                   bool attach) {
  const std::uint32_t honest_rank = 1 - forged_rank;
  if (!job.forged.SendHello(phubd.port, MakeHello(forged_rank, 2, kHostileModel))) {
    ADD_FAILURE() << "cannot reach phubd's control port";
    return false;
  }
  client::PsClientOptions options;
  options.port = phubd.port;
  options.connect_timeout_ms = 2000;
  std::string welcome_error;
  bool in_time = RunBounded(phubd, std::chrono::seconds(10), [&] {
    std::thread forged([&] {
      welcome_error = job.forged.AwaitWelcome(kHostileModel, std::chrono::seconds(8));
      if (welcome_error.empty() && attach && !job.forged.AttachAll()) {
        welcome_error = "cannot attach";
      }
    });
    job.honest = std::move(ConnectWorkers(options, 2, {honest_rank}, kHostileModel)[0]);
    forged.join();
  });
  if (!in_time) {
    ADD_FAILURE() << "the job of a forged and an honest worker did not form within 10 s";
    return false;
  }
  if (!welcome_error.empty()) {
    ADD_FAILURE() << "forged rank " << forged_rank << ": " << welcome_error;
    return false;
  }
  if (!job.honest.status.ok()) {
    ADD_FAILURE() << "honest rank " << honest_rank << ": " << job.honest.status;
    return false;
  }
  job.honest_start = job.honest.weights;
  return true;
}

DataPlaneWatch WatchUntilClosed(RawSocket& socket, std::chrono::milliseconds timeout) {
  DataPlaneWatch watch;
  const auto deadline = Clock::now() + timeout;
  while (true) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return watch;
    transport::WireHeader header;
    std::vector<std::byte> payload;
    switch (socket.ReadWire(header, payload, left)) {
      case RawSocket::Read::kOk:
        if (header.op == transport::Op::kWeights) {
          ++(header.iteration == 0 ? watch.weights_at_iteration_0
                                   : watch.weights_after_iteration_0);
        }
        break;
      case RawSocket::Read::kClosed:
        watch.closed = true;
        return watch;
      case RawSocket::Read::kGarbage:
        // Not a header phubd would send: read on to the close.
        watch.closed = socket.WaitClosed(left);
        return watch;
      case RawSocket::Read::kTimeout:
        return watch;
    }
  }
}

bool ReadInitialWeights(ForgedMember& forged, std::uint32_t core,
                        std::chrono::milliseconds timeout) {
  const auto deadline = Clock::now() + timeout;
  std::size_t expected = forged.table->chunks_on_core(core).size();
  std::size_t got = 0;
  while (got < expected) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    transport::WireHeader header;
    std::vector<std::byte> payload;
    if (left.count() <= 0 ||
        forged.data[core].ReadWire(header, payload, left) != RawSocket::Read::kOk) {
      return false;
    }
    if (header.op == transport::Op::kWeights && header.iteration == 0) ++got;
  }
  return true;
}

bool ForgedIteration(ForgedMember& forged, std::uint64_t it, std::chrono::milliseconds timeout) {
  const keys::KeyTable& table = *forged.table;
  for (const keys::Chunk& chunk : table.chunks()) {
    std::vector<float> grad(chunk.elements);
    for (std::uint32_t i = 0; i < chunk.elements; ++i) {
      grad[i] = TestValue(1, forged.rank, it, chunk.tensor, chunk.offset + i);
    }
    auto header = Header(transport::Op::kPush, forged.rank, chunk.id, it,
                         static_cast<std::uint32_t>(grad.size() * sizeof(float)));
    if (!forged.data[table.owner(chunk.id)].SendWire(header, std::as_bytes(std::span(grad)))) {
      return false;
    }
  }
  const auto deadline = Clock::now() + timeout;
  for (std::uint32_t core = 0; core < forged.data.size(); ++core) {
    std::size_t got = 0;
    while (got < table.chunks_on_core(core).size()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      transport::WireHeader header;
      std::vector<std::byte> payload;
      if (left.count() <= 0 ||
          forged.data[core].ReadWire(header, payload, left) != RawSocket::Read::kOk) {
        return false;
      }
      if (header.op == transport::Op::kWeights && header.iteration == it) ++got;
    }
  }
  return true;
}

bool ForgedInit(ForgedMember& forged) {
  const keys::KeyTable& table = *forged.table;
  for (const keys::Chunk& chunk : table.chunks()) {
    std::vector<float> weights(chunk.elements);
    for (std::uint32_t i = 0; i < chunk.elements; ++i) {
      weights[i] = TestValue(1, kInitRank, 0, chunk.tensor, chunk.offset + i);
    }
    auto header = Header(transport::Op::kInit, forged.rank, chunk.id, 0,
                         static_cast<std::uint32_t>(weights.size() * sizeof(float)));
    if (!forged.data[table.owner(chunk.id)].SendWire(header, std::as_bytes(std::span(weights)))) {
      return false;
    }
  }
  return true;
}

std::vector<std::vector<float>> InitialWeights() {
  std::vector<std::vector<float>> weights;
  for (std::uint32_t t = 0; t < kHostileModel.size(); ++t) {
    weights.emplace_back(kHostileModel[t].elements);
    for (std::uint64_t i = 0; i < kHostileModel[t].elements; ++i) {
      weights[t][i] = TestValue(1, kInitRank, 0, t, i);
    }
  }
  return weights;
}

void ForgedLeave(ForgedMember& forged) {
  for (RawSocket& socket : forged.data) {
    socket.SendWire(Header(transport::Op::kBye, forged.rank, 0, 0, 0));
  }
  forged.control.SendMessage(WrapGoodbye(0));
  ForgedVanish(forged);
}

void ForgedVanish(ForgedMember& forged) {
  for (RawSocket& socket : forged.data) socket.Close();
  forged.control.Close();
}

proto::Error ExpectErrorThenClose(RawSocket& socket, std::chrono::milliseconds timeout,
                                  std::optional<proto::Error::Code> code) {
  proto::ControlMessage reply;
  RawSocket::Read r = socket.ReadMessage(reply, timeout);
  EXPECT_EQ(r, RawSocket::Read::kOk)
      << "expected an Error from phubd within " << timeout.count() << " ms, got: " << ReadName(r);
  if (r != RawSocket::Read::kOk) return {};
  EXPECT_TRUE(reply.has_error()) << "expected an Error, got "
                                 << reply.ShortDebugString().substr(0, 200);
  if (code) {
    EXPECT_EQ(reply.error().code(), *code)
        << "Error " << proto::Error::Code_Name(reply.error().code()) << ": "
        << reply.error().message().substr(0, 300);
  }
  EXPECT_TRUE(socket.WaitClosed(std::chrono::seconds(2)))
      << "phubd sent the Error but kept the connection open";
  return reply.error();
}

}  // namespace phub::testing
