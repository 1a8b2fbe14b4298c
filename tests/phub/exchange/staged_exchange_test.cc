// The staging pipeline (phub/exchange/staged_exchange.h) over a real exchange: two ranks of the
// TCP ring in this process, each serving its "device" buffers through a copy engine. With the
// host engine staging for real (distinct buffers, one copy in flight at a time: back-pressure
// on every push) and with the CPU worker's engine (no copies), training steps exactly like a
// float64 reference of synchronous SGD with momentum; a second Push before Wait is refused; a
// peer that leaves fails the survivor's next call, never hangs it. Over an exchange answering in
// this process: Close returns at once while the lander waits in that exchange for an answer
// that does not come; a copy the engine refuses fails every later call; pushes on one thread
// and waits on another land every answer. On a GPU the same through the CUDA engine, and
// `--comm nccl` in place on the device (skipped elsewhere, saying why), with fixed values and
// with a schedule's. A schedule's values (BeginIteration) reach the exchange below after every
// push made before them. A long tensor travels in segments: training in segments still follows
// float64; its first segment is pushed while the others are still copying, and a segment's
// weights go to the device as soon as they land.
#include "phub/exchange/staged_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "phub/exchange/make_exchange.h"
#include "phub/staging/host_copy_engine.h"
#ifdef PHUB_HAVE_CUDA_STAGING
#include <cuda_runtime.h>

#include "phub/staging/cuda_copy_engine.h"
#endif

namespace phub::exchange {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 4;
constexpr float kLr = 0.1f, kMomentum = 0.9f;
const std::vector<keys::TensorSpec> kTensors = {{"a", 3}, {"b", 70001}, {"c", 1}, {"d", 4097}};

// Rank r's gradient of tensor t at step s: random, different on every rank and step.
std::vector<float> Gradient(int rank, int step, std::size_t t, std::size_t n) {
  std::mt19937 rng(1000 * rank + 10 * step + static_cast<unsigned>(t));
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> g(n);
  for (float& x : g) x = u(rng);
  return g;
}
std::vector<float> InitialWeights(int rank, std::size_t t, std::size_t n) {
  return Gradient(rank + 7, 99, t, n);  // only rank 0's may survive Init
}

// A schedule's values of step s (the exchange's BeginIteration): the lr warms up, the momentum
// moves.
kernels::StepValues ScheduledValues(int s) {
  return {.lr = kLr * static_cast<float>(s + 1) / kSteps,
          .momentum = kMomentum - 0.1f * static_cast<float>(s)};
}

// Momentum SGD on the mean gradient in float64, from rank 0's weights; `scheduled`: with
// ScheduledValues(s) at step s, else kLr and kMomentum throughout.
std::vector<std::vector<double>> Reference(int world, bool scheduled = false) {
  std::vector<std::vector<double>> w, v;
  for (std::size_t t = 0; t < kTensors.size(); ++t) {
    auto w0 = InitialWeights(0, t, kTensors[t].elements);
    w.emplace_back(w0.begin(), w0.end());
    v.emplace_back(w0.size(), 0.0);
  }
  for (int s = 0; s < kSteps; ++s) {
    for (std::size_t t = 0; t < kTensors.size(); ++t) {
      std::vector<double> mean(kTensors[t].elements, 0.0);
      for (int r = 0; r < world; ++r) {
        auto g = Gradient(r, s, t, mean.size());
        for (std::size_t i = 0; i < mean.size(); ++i) mean[i] += g[i] / world;
      }
      const kernels::StepValues values =
          scheduled ? ScheduledValues(s) : kernels::StepValues{.lr = kLr, .momentum = kMomentum};
      for (std::size_t i = 0; i < mean.size(); ++i) {
        v[t][i] = double{values.momentum} * v[t][i] + mean[i];
        w[t][i] -= double{values.lr} * v[t][i];
      }
    }
  }
  return w;
}

// One rank's "device": its gradient and weight buffers, wherever `alloc` puts them.
struct Device {
  std::function<float*(std::size_t)> alloc;
  std::function<void(float* to, const float* from, std::size_t n)> copy;  // any direction
  std::function<void(float*)> free;
};

Device HostDevice() {
  return {[](std::size_t n) { return new float[n]; },
          [](float* to, const float* from, std::size_t n) { std::copy(from, from + n, to); },
          [](float* p) { delete[] p; }};
}

class StagedExchangeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "phub-sx-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  ExchangeOptions Options(int rank, int world, ExchangeKind kind) {
    ExchangeOptions o;
    o.kind = kind;
    o.membership = {static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(world)};
    o.ring.ring.rendezvous = dir_;
    o.ring.ring.connect_timeout_ms = 20000;
    for (kernels::OptimizerConfig* c : {&o.ring.optimizer, &o.nccl.optimizer}) {
      c->kind = kernels::OptimizerKind::kMomentum;
      c->lr = kLr;
      c->momentum = kMomentum;
    }
    o.nccl.rendezvous = dir_;
    o.segment_bytes = segment_bytes_;
    return o;
  }

  // Trains kSteps on one rank; returns its final weights (or the first error's message).
  std::string TrainRank(int rank, int world, ExchangeKind kind,
                        std::shared_ptr<staging::CopyEngine> engine, const Device& device,
                        void* stream, std::vector<std::vector<float>>& out) {
    std::vector<float*> g, w;
    std::vector<std::span<float>> grads, weights;
    for (std::size_t t = 0; t < kTensors.size(); ++t) {
      const std::size_t n = kTensors[t].elements;
      g.push_back(device.alloc(n));
      w.push_back(device.alloc(n));
      device.copy(w[t], InitialWeights(rank, t, n).data(), n);
      grads.emplace_back(g[t], n);
      weights.emplace_back(w[t], n);
    }
    std::string error;
    auto make = [&]() -> StatusOr<std::unique_ptr<DeviceExchange>> {
      if (!direct_)
        return MakeDeviceExchange(Options(rank, world, kind), engine, kTensors, grads, weights);
      // Direct (GPUDirect's path): the exchange below is made over the device buffers.
      std::vector<std::span<const float>> sent(grads.begin(), grads.end());
      PHUB_ASSIGN_OR_RETURN(
          auto x, StagedExchange::Create(
                      engine, kTensors, sent, weights,
                      [&](std::vector<keys::TensorSpec> t, std::vector<std::span<float>> w) {
                        // Each (segment's) landing lies in a device buffer, not in staging.
                        auto on_device = [&](std::span<float> landed) {
                          for (std::span<float> d : weights) {
                            if (landed.data() >= d.data() &&
                                landed.data() + landed.size() <= d.data() + d.size()) {
                              return true;
                            }
                          }
                          return false;
                        };
                        for (std::size_t i = 0; i < w.size(); ++i) {
                          if (!on_device(w[i])) {
                            return StatusOr<std::unique_ptr<GradientExchange>>(
                                absl::InternalError("direct: the exchange got a staging buffer"));
                          }
                        }
                        return MakeExchange(Options(rank, world, kind), std::move(t), std::move(w));
                      },
                      {.direct = true, .segment_bytes = segment_bytes_}));
      return std::unique_ptr<DeviceExchange>(std::move(x));
    };
    auto run = [&]() -> Status {
      PHUB_ASSIGN_OR_RETURN(auto x, make());
      PHUB_RETURN_IF_ERROR(x->Init(stream));
      for (int s = 0; s < kSteps; ++s) {
        if (scheduled_) PHUB_RETURN_IF_ERROR(x->BeginIteration(ScheduledValues(s)));
        for (std::size_t t = kTensors.size(); t-- > 0;) {  // backward order
          auto host = Gradient(rank, s, t, kTensors[t].elements);
          device.copy(g[t], host.data(), host.size());
          PHUB_RETURN_IF_ERROR(x->Push(static_cast<std::uint32_t>(t), stream));
          if (s == 0 && t == 0) {
            Status again = x->Push(0, stream);
            if (again.code() != absl::StatusCode::kFailedPrecondition) {
              return absl::InternalError(
                  absl::StrCat("a second Push was not refused: ", again.ToString()));
            }
          }
        }
        for (std::size_t t = 0; t < kTensors.size(); ++t) {
          PHUB_RETURN_IF_ERROR(x->Wait(static_cast<std::uint32_t>(t), stream));
        }
      }
      PHUB_RETURN_IF_ERROR(x->WaitAll(stream));
      return x->Close();
    };
    if (Status s = run(); !s.ok()) error = s.ToString();
    out.clear();
    for (std::size_t t = 0; t < kTensors.size(); ++t) {
      out.emplace_back(kTensors[t].elements);
      device.copy(out[t].data(), w[t], out[t].size());
      device.free(g[t]);
      device.free(w[t]);
    }
    return error;
  }

  void ExpectLikeReference(const std::vector<std::vector<float>>& got, int world) {
    const auto want = Reference(world, scheduled_);
    for (std::size_t t = 0; t < kTensors.size(); ++t) {
      double err = 0, norm = 0;
      for (std::size_t i = 0; i < want[t].size(); ++i) {
        ASSERT_FALSE(std::isnan(got[t][i])) << "tensor " << t << " element " << i;
        err += (got[t][i] - want[t][i]) * (got[t][i] - want[t][i]);
        norm += want[t][i] * want[t][i];
      }
      EXPECT_LT(std::sqrt(err / norm), 1e-5) << "tensor " << kTensors[t].name;
    }
  }

  void TrainTwoRanks(const std::function<std::shared_ptr<staging::CopyEngine>()>& make_engine) {
    // A fresh rendezvous: an earlier run's ring left its addresses there.
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::vector<std::vector<float>> w0, w1;
    std::string e1;
    std::thread peer([&] {
      e1 = TrainRank(1, 2, ExchangeKind::kRing, make_engine(), HostDevice(), nullptr, w1);
    });
    const std::string e0 =
        TrainRank(0, 2, ExchangeKind::kRing, make_engine(), HostDevice(), nullptr, w0);
    peer.join();
    ASSERT_EQ(e0, "");
    ASSERT_EQ(e1, "");
    ExpectLikeReference(w0, 2);
    EXPECT_EQ(w0, w1);  // the ring leaves every rank bit-identical
  }

  std::string dir_;
  bool direct_ = false;
  bool scheduled_ = false;  // BeginIteration(ScheduledValues(s)) before each step's pushes
  std::uint64_t segment_bytes_ = kDefaultSegmentBytes;
};

TEST_F(StagedExchangeTest, StagedThroughRealCopiesOneInFlightTrainsLikeFloat64) {
  TrainTwoRanks([] {
    return std::shared_ptr<staging::CopyEngine>(
        *staging::MakeHostCopyEngine({.max_in_flight = 1, .separate_device = true}));
  });
}

// GPUDirect's path, on this machine's engine with a "device" of its own: the exchange below
// sends from and lands into the device buffers (no staging given to it), after each producer's
// fence, and trains like float64. (No machine here has a GPU and an HCA: the NIC's side of it,
// dma-buf registration, is tested only as far as its refusals go, in gpudirect_test.)
TEST_F(StagedExchangeTest, DirectPushesFromTheDeviceBuffersAndTrainsLikeFloat64) {
  direct_ = true;
  TrainTwoRanks([] {
    return std::shared_ptr<staging::CopyEngine>(
        *staging::MakeHostCopyEngine({.max_in_flight = 1, .separate_device = true}));
  });
}

// A schedule through the staging: each step's values reach the ring below before that step's
// pushes, and the weights follow the float64 reference of the same schedule.
TEST_F(StagedExchangeTest, StagedThroughRealCopiesFollowsAScheduleLikeFloat64) {
  scheduled_ = true;
  TrainTwoRanks([] {
    return std::shared_ptr<staging::CopyEngine>(
        *staging::MakeHostCopyEngine({.max_in_flight = 1, .separate_device = true}));
  });
}

// Segments of 4 KiB: "b" (70001 floats) travels as 69 segments and "d" (4097) as 5, each copied,
// pushed and landed on its own; staged with one copy in flight, on the CPU worker's engine and
// direct, training follows the float64 reference all the same.
TEST_F(StagedExchangeTest, TensorsInSegmentsTrainLikeFloat64OnEveryPath) {
  segment_bytes_ = 4096;
  auto separate = [] {
    return std::shared_ptr<staging::CopyEngine>(
        *staging::MakeHostCopyEngine({.max_in_flight = 1, .separate_device = true}));
  };
  {
    SCOPED_TRACE("staged, one copy in flight");
    TrainTwoRanks(separate);
  }
  {
    SCOPED_TRACE("the CPU worker's engine");
    TrainTwoRanks(
        [] { return std::shared_ptr<staging::CopyEngine>(*staging::MakeHostCopyEngine()); });
  }
  {
    SCOPED_TRACE("direct");
    direct_ = true;
    TrainTwoRanks(separate);
  }
}

TEST(SegmentTensorsTest, CutsLongTensorsAndKeepsTheOthersWhole) {
  auto cut = SegmentTensors({{"a", 3}, {"b", 10}, {"c", 8}, {"e", 0}}, 16);  // 4 floats
  ASSERT_TRUE(cut.ok()) << cut.status();
  const std::vector<keys::TensorSpec> want = {{"a", 3},   {"b#0", 4}, {"b#1", 4}, {"b#2", 2},
                                              {"c#0", 4}, {"c#1", 4}, {"e", 0}};
  EXPECT_EQ(*cut, want);
  auto whole = SegmentTensors({{"b", 10}}, 0);
  ASSERT_TRUE(whole.ok());
  EXPECT_EQ(*whole, (std::vector<keys::TensorSpec>{{"b", 10}}));
  auto odd = SegmentTensors({{"b", 10}}, 6);
  EXPECT_EQ(odd.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(odd.status().message()), HasSubstr("multiple of 4"));
}

TEST_F(StagedExchangeTest, DirectOnAnEngineWhoseDeviceIsTheHostIsRefused) {
  std::shared_ptr<staging::CopyEngine> engine(*staging::MakeHostCopyEngine());
  std::vector<float> g(5), w(5);
  auto x = StagedExchange::Create(
      engine, {{"w", 5}}, {std::span<const float>(g)}, {std::span<float>(w)},
      [](std::vector<keys::TensorSpec>,
         std::vector<std::span<float>>) -> StatusOr<std::unique_ptr<GradientExchange>> {
        return absl::InternalError("must not be reached");
      },
      {.direct = true});
  ASSERT_FALSE(x.ok());
  EXPECT_EQ(x.status().code(), absl::StatusCode::kInvalidArgument) << x.status();
}

TEST_F(StagedExchangeTest, TheCpuWorkersEngineSendsTheBuffersThemselvesAndTrainsTheSame) {
  TrainTwoRanks(
      [] { return std::shared_ptr<staging::CopyEngine>(*staging::MakeHostCopyEngine()); });
}

TEST_F(StagedExchangeTest, APeerThatLeavesFailsTheNextCallInsteadOfHanging) {
  std::shared_ptr<staging::CopyEngine> engine(
      *staging::MakeHostCopyEngine({.separate_device = true}));
  std::vector<float> g0(5, 1), w0(5, 0), g1(5, 1), w1(5, 0);
  std::unique_ptr<DeviceExchange> peer;
  std::thread t([&] {
    auto x = MakeDeviceExchange(Options(1, 2, ExchangeKind::kRing), engine, {{"w", 5}},
                                {std::span<float>(g1)}, {std::span<float>(w1)});
    if (x.ok() && (*x)->Init(nullptr).ok()) peer = *std::move(x);
  });
  auto x = MakeDeviceExchange(Options(0, 2, ExchangeKind::kRing), engine, {{"w", 5}},
                              {std::span<float>(g0)}, {std::span<float>(w0)});
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE((*x)->Init(nullptr).ok());
  t.join();
  ASSERT_NE(peer, nullptr);
  ASSERT_TRUE(peer->Close().ok());  // leaves without pushing
  peer.reset();
  Status pushed = (*x)->Push(0, nullptr);
  Status waited = pushed.ok() ? (*x)->Wait(0, nullptr) : pushed;
  EXPECT_FALSE(waited.ok());
  EXPECT_THAT(waited.ToString(), HasSubstr("tensor 0"));
  EXPECT_FALSE((*x)->Push(0, nullptr).ok());  // the first failure, again
  (void)(*x)->Close();                        // returns (with the ring's error): never hangs
}

TEST_F(StagedExchangeTest, BuffersThatDoNotMatchTheTableAreRefused) {
  std::shared_ptr<staging::CopyEngine> engine(*staging::MakeHostCopyEngine());
  std::vector<float> g(3), w(4);
  auto x = MakeDeviceExchange(Options(0, 1, ExchangeKind::kRing), engine, {{"w", 4}},
                              {std::span<float>(g)}, {std::span<float>(w)});
  EXPECT_EQ(x.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(x.status().message()), HasSubstr("buffers of 3 (gradient)"));
}

// The exchange below the staging, answering in this process: Push(t) answers at once with
// weights[t] = 2 * gradient (or, `answer` false, never: a peer that stays silent) and hands t
// to NextPush; Wait(t) blocks until t's push is answered, Close, or `wait_limit`.
class LocalExchange final : public GradientExchange {
 public:
  LocalExchange(std::vector<std::span<float>> weights, bool answer,
                std::chrono::milliseconds wait_limit)
      : weights_(std::move(weights)),
        answer_(answer),
        wait_limit_(wait_limit),
        pushed_(weights_.size()),
        answered_(weights_.size()),
        grads_(weights_.size()) {}

  Status Init() override { return absl::OkStatus(); }
  // Records the values with the number of pushes that reached this exchange before them;
  // refuses a negative lr, as a real exchange refuses values its optimizer does not take.
  Status BeginIteration(const kernels::StepValues& values) override {
    if (values.lr < 0) return absl::InvalidArgumentError("local exchange: lr < 0");
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return absl::FailedPreconditionError("local exchange: BeginIteration after Close");
    begun_.push_back({values, total_pushed_});
    return absl::OkStatus();
  }
  Status Push(std::uint32_t t, std::span<const float> grads) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (closed_) return absl::FailedPreconditionError("local exchange: Push after Close");
      ++pushed_[t];
      ++total_pushed_;
      grads_[t] = grads;
      if (answer_) {
        for (std::size_t i = 0; i < grads.size(); ++i) weights_[t][i] = 2 * grads[i];
        ++answered_[t];
      }
      pushes_.push_back(t);
    }
    cv_.notify_all();
    return absl::OkStatus();
  }
  Status Wait(std::uint32_t t) override {
    std::unique_lock<std::mutex> lock(mu_);
    ++waiting_;
    cv_.notify_all();
    const bool woken =
        cv_.wait_for(lock, wait_limit_, [&] { return closed_ || answered_[t] == pushed_[t]; });
    --waiting_;
    if (answered_[t] == pushed_[t]) return absl::OkStatus();
    ++(woken ? waits_ended_by_close_ : waits_timed_out_);
    return woken ? absl::CancelledError("local exchange: closed while waiting")
                 : absl::DeadlineExceededError("local exchange: no answer within the limit");
  }
  Status WaitAll() override { return absl::OkStatus(); }
  Status Close() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      closed_ = true;
    }
    cv_.notify_all();
    return absl::OkStatus();
  }
  std::string name() const override { return "local"; }

  // Answers tensor t's last push now (an exchange made with `answer` false: a slow peer).
  void AnswerPushed(std::uint32_t t) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (std::size_t i = 0; i < grads_[t].size(); ++i) weights_[t][i] = 2 * grads_[t][i];
      answered_[t] = pushed_[t];
    }
    cv_.notify_all();
  }
  // Waits that ended unanswered: woken by Close, or at the wait's limit.
  int waits_ended_by_close() {
    std::lock_guard<std::mutex> lock(mu_);
    return waits_ended_by_close_;
  }
  int waits_timed_out() {
    std::lock_guard<std::mutex> lock(mu_);
    return waits_timed_out_;
  }
  // True once some thread is blocked in Wait (within `limit`).
  bool AwaitWaiter(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [this] { return waiting_ > 0; });
  }
  // Each BeginIteration's values and the pushes that had reached this exchange before it.
  std::vector<std::pair<kernels::StepValues, std::uint64_t>> begun() {
    std::lock_guard<std::mutex> lock(mu_);
    return begun_;
  }
  // The next tensor pushed to this exchange, in push order (nullopt after `limit`).
  std::optional<std::uint32_t> NextPush(std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, limit, [this] { return !pushes_.empty(); })) return std::nullopt;
    const std::uint32_t t = pushes_.front();
    pushes_.pop_front();
    return t;
  }

 private:
  const std::vector<std::span<float>> weights_;
  const bool answer_;
  const std::chrono::milliseconds wait_limit_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::uint64_t> pushed_, answered_;
  std::vector<std::span<const float>> grads_;  // each tensor's last push
  std::deque<std::uint32_t> pushes_;
  std::uint64_t total_pushed_ = 0;
  std::vector<std::pair<kernels::StepValues, std::uint64_t>> begun_;
  int waiting_ = 0;
  int waits_ended_by_close_ = 0;
  int waits_timed_out_ = 0;
  bool closed_ = false;
};

// A StagedExchange over a LocalExchange (`*local` while the exchange lives) and `engine`.
StatusOr<std::unique_ptr<StagedExchange>> OverLocal(
    std::shared_ptr<staging::CopyEngine> engine, const std::vector<keys::TensorSpec>& tensors,
    std::vector<std::vector<float>>& grads, std::vector<std::vector<float>>& weights, bool answer,
    std::chrono::milliseconds wait_limit, LocalExchange** local,
    StagedExchangeOptions options = {}) {
  std::vector<std::span<const float>> g;
  std::vector<std::span<float>> w;
  grads.clear();
  weights.clear();
  for (const keys::TensorSpec& t : tensors) {
    grads.emplace_back(t.elements, 1.0f);
    weights.emplace_back(t.elements, 0.0f);
    g.emplace_back(grads.back());
    w.emplace_back(weights.back());
  }
  return StagedExchange::Create(
      std::move(engine), tensors, std::move(g), std::move(w),
      [&](std::vector<keys::TensorSpec>,
          std::vector<std::span<float>> landed) -> StatusOr<std::unique_ptr<GradientExchange>> {
        auto x = std::make_unique<LocalExchange>(std::move(landed), answer, wait_limit);
        *local = x.get();
        return std::unique_ptr<GradientExchange>(std::move(x));
      },
      options);
}

std::shared_ptr<staging::CopyEngine> StagingHostEngine(std::size_t max_in_flight = 256) {
  return std::shared_ptr<staging::CopyEngine>(
      *staging::MakeHostCopyEngine({.max_in_flight = max_in_flight, .separate_device = true}));
}

// The lander waits in the exchange below for an answer that does not come (a silent peer):
// Close closes that exchange first, so it returns at once instead of after the wait's limit.
TEST(StagedExchangeCloseTest, ReturnsAtOnceWhileTheLanderIsBlockedInTheExchangesWait) {
  constexpr auto kLimit = std::chrono::seconds(5);
  std::vector<std::vector<float>> g, w;
  LocalExchange* local = nullptr;
  auto x = OverLocal(StagingHostEngine(), {{"w", 5}}, g, w, /*answer=*/false, kLimit, &local);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE((*x)->Init(nullptr).ok());
  ASSERT_TRUE((*x)->Push(0, nullptr).ok());
  ASSERT_TRUE(local->AwaitWaiter(kLimit)) << "the lander never waited in the exchange";

  const Status closed = (*x)->Close();
  EXPECT_TRUE(closed.ok()) << closed;
  // Close joined the lander: its Wait ended, and it must have been the exchange's close that
  // ended it, not the wait's own limit (Close joining first would have waited that out).
  EXPECT_EQ(local->waits_ended_by_close(), 1);
  EXPECT_EQ(local->waits_timed_out(), 0) << "Close waited for the lander's blocked Wait";
  EXPECT_EQ((*x)->Wait(0, nullptr).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*x)->Push(0, nullptr).code(), absl::StatusCode::kFailedPrecondition);
}

// The host engine staging for real, every call forwarded: the engines below change one thing.
class ForwardingEngine : public staging::CopyEngine {
 public:
  std::string Describe() const override { return base_->Describe(); }
  bool DeviceIsHost() const override { return base_->DeviceIsHost(); }
  StatusOr<staging::StagingBuffer> AllocateStaging(std::size_t floats) override {
    return base_->AllocateStaging(floats);
  }
  StatusOr<staging::Fence> Record(staging::Stream producer) override {
    return base_->Record(producer);
  }
  StatusOr<staging::Fence> ToHost(const float* device, float* host, std::size_t n,
                                  const staging::Fence& after) override {
    return base_->ToHost(device, host, n, after);
  }
  StatusOr<staging::Fence> ToDevice(const float* host, float* device, std::size_t n,
                                    const staging::Fence& after) override {
    return base_->ToDevice(host, device, n, after);
  }
  Status HostWait(const staging::Fence& fence, std::chrono::milliseconds timeout) override {
    return base_->HostWait(fence, timeout);
  }
  Status StreamWait(staging::Stream consumer, const staging::Fence& fence) override {
    return base_->StreamWait(consumer, fence);
  }

 private:
  std::shared_ptr<staging::CopyEngine> base_ = StagingHostEngine();
};

// The host engine, refusing the next copy to host once told to (as a CUDA engine refuses a
// copy it cannot enqueue, or whose ring stays full).
class RefusingEngine final : public ForwardingEngine {
 public:
  void RefuseNextCopyToHost() { refusals_ = 1; }

  StatusOr<staging::Fence> ToHost(const float* device, float* host, std::size_t n,
                                  const staging::Fence& after) override {
    if (refusals_.fetch_sub(1) > 0) {
      return absl::ResourceExhaustedError("injected: the copy to host is refused");
    }
    return ForwardingEngine::ToHost(device, host, n, after);
  }

 private:
  std::atomic<int> refusals_{0};
};

TEST(StagedExchangePushTest, ACopyTheEngineRefusesFailsEveryLaterCall) {
  std::vector<std::vector<float>> g, w;
  LocalExchange* local = nullptr;
  auto engine = std::make_shared<RefusingEngine>();
  auto x = OverLocal(engine, {{"a", 3}, {"b", 4}}, g, w, /*answer=*/true, std::chrono::seconds(5),
                     &local);
  ASSERT_TRUE(x.ok()) << x.status();
  ASSERT_TRUE((*x)->Init(nullptr).ok());
  engine->RefuseNextCopyToHost();
  const Status refused = (*x)->Push(1, nullptr);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.ToString(), HasSubstr("tensor 1"));
  EXPECT_THAT(refused.ToString(), HasSubstr("injected"));
  // The engine would take these copies now: the exchange stays failed all the same.
  EXPECT_EQ((*x)->Push(0, nullptr), refused);
  EXPECT_EQ((*x)->Wait(0, nullptr), refused);
  EXPECT_EQ((*x)->Wait(1, nullptr), refused);
  EXPECT_EQ((*x)->Push(1, nullptr), refused);
  EXPECT_EQ((*x)->WaitAll(nullptr), refused);
  (void)(*x)->Close();
}

// A schedule's values reach the exchange below only after every push made before them (the
// pusher may still hold the last iteration's, waiting for their copies to host), so none of
// that iteration steps with the next one's values; a refusal from below comes back and the
// exchange goes on. The same on the CPU worker's engine (pushes are made inline).
TEST(StagedExchangeScheduleTest, ValuesReachTheExchangeBelowAfterEveryEarlierPush) {
  constexpr int kRounds = 6;
  for (bool staged : {true, false}) {
    SCOPED_TRACE(staged ? "staged, one copy in flight" : "the CPU worker's engine");
    std::vector<std::vector<float>> g, w;
    LocalExchange* local = nullptr;
    auto made =
        OverLocal(staged ? StagingHostEngine(/*max_in_flight=*/1)
                         : std::shared_ptr<staging::CopyEngine>(*staging::MakeHostCopyEngine()),
                  kTensors, g, w, /*answer=*/true, std::chrono::seconds(20), &local);
    ASSERT_TRUE(made.ok()) << made.status();
    StagedExchange& x = **made;
    ASSERT_TRUE(x.Init(nullptr).ok());
    for (int r = 0; r < kRounds; ++r) {
      // Right after the last round's pushes, none of them waited for.
      ASSERT_TRUE(x.BeginIteration({.lr = 0.01f * static_cast<float>(r + 1)}).ok());
      for (std::size_t t = kTensors.size(); t-- > 0;) {
        const auto tensor = static_cast<std::uint32_t>(t);
        if (r > 0) {
          ASSERT_TRUE(x.Wait(tensor, nullptr).ok());
        }
        ASSERT_TRUE(x.Push(tensor, nullptr).ok());
      }
    }
    const Status refused = x.BeginIteration({.lr = -1.0f});
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
    EXPECT_TRUE(x.WaitAll(nullptr).ok());
    const auto begun = local->begun();
    ASSERT_EQ(begun.size(), static_cast<std::size_t>(kRounds));  // the refused one is not
    for (int r = 0; r < kRounds; ++r) {
      EXPECT_EQ(begun[r].second, r * kTensors.size()) << "values of round " << r;
      EXPECT_EQ(begun[r].first.lr, 0.01f * static_cast<float>(r + 1));
    }
    EXPECT_TRUE(x.Close().ok());
  }
}

// The host engine whose copies to host can be held back: HostWait blocks while held (as a GPU
// still busy with backward holds the copies a push waits for).
class HoldingEngine final : public ForwardingEngine {
 public:
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }

  Status HostWait(const staging::Fence& fence, std::chrono::milliseconds timeout) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, timeout, [this] { return !held_; })) {
        return absl::DeadlineExceededError("holding engine: held past the wait's limit");
      }
    }
    return ForwardingEngine::HostWait(fence, timeout);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
};

// The pusher holds every push of an iteration (their copies to host are not done): the next
// iteration's values wait for all of them to reach the exchange below, never overtake them.
TEST(StagedExchangeScheduleTest, ValuesWaitForPushesThePusherStillHolds) {
  std::vector<std::vector<float>> g, w;
  LocalExchange* local = nullptr;
  auto engine = std::make_shared<HoldingEngine>();
  auto made = OverLocal(engine, kTensors, g, w, /*answer=*/true, std::chrono::seconds(20), &local);
  ASSERT_TRUE(made.ok()) << made.status();
  StagedExchange& x = **made;
  ASSERT_TRUE(x.Init(nullptr).ok());
  engine->Hold();
  for (std::size_t t = kTensors.size(); t-- > 0;) {
    ASSERT_TRUE(x.Push(static_cast<std::uint32_t>(t), nullptr).ok());
  }
  std::future<Status> begun =
      std::async(std::launch::async, [&] { return x.BeginIteration({.lr = 0.5f}); });
  // It must still be waiting (an exchange that forwarded at once would have returned by now);
  // then the copies finish and it goes on.
  EXPECT_EQ(begun.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout);
  engine->Release();
  const Status status = begun.get();
  EXPECT_TRUE(status.ok()) << status;
  const auto values = local->begun();
  ASSERT_EQ(values.size(), 1u);
  EXPECT_EQ(values[0].second, kTensors.size()) << "the values overtook pushes made before them";
  EXPECT_TRUE(x.WaitAll(nullptr).ok());
  EXPECT_TRUE(x.Close().ok());
}

// The host engine that, once told to, holds back every copy to host after the next one until
// Release (as a GPU still copying the rest of a large tensor); it counts the copies to the
// device enqueued.
class SegmentGateEngine final : public ForwardingEngine {
 public:
  void HoldAllButTheNextCopyToHost() {
    std::lock_guard<std::mutex> lock(mu_);
    held_ = true;
    first_ = nullptr;
  }
  void Release() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      held_ = false;
    }
    cv_.notify_all();
  }
  // True once `n` copies to the device have been enqueued (within `limit`).
  bool AwaitCopiesToDevice(int n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return to_device_ >= n; });
  }
  int copies_to_device() {
    std::lock_guard<std::mutex> lock(mu_);
    return to_device_;
  }

  StatusOr<staging::Fence> ToHost(const float* device, float* host, std::size_t n,
                                  const staging::Fence& after) override {
    PHUB_ASSIGN_OR_RETURN(staging::Fence copied, ForwardingEngine::ToHost(device, host, n, after));
    std::lock_guard<std::mutex> lock(mu_);
    if (held_ && first_ == nullptr) first_ = copied.state();
    return copied;
  }
  StatusOr<staging::Fence> ToDevice(const float* host, float* device, std::size_t n,
                                    const staging::Fence& after) override {
    PHUB_ASSIGN_OR_RETURN(staging::Fence copied,
                          ForwardingEngine::ToDevice(host, device, n, after));
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++to_device_;
    }
    cv_.notify_all();
    return copied;
  }
  Status HostWait(const staging::Fence& fence, std::chrono::milliseconds timeout) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, timeout, [&] { return !held_ || fence.state() == first_; })) {
        return absl::DeadlineExceededError("gated engine: held past the wait's limit");
      }
    }
    return ForwardingEngine::HostWait(fence, timeout);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool held_ = false;
  void* first_ = nullptr;  // while held: the first copy to host's fence since
  int to_device_ = 0;
};

// One tensor of 1,000 floats in segments of 256: its gradient, element i = i.
constexpr std::uint64_t kSegmentBytes = 1024;
const std::vector<keys::TensorSpec> kLong = {{"long", 1000}};
void NumberGradients(std::vector<std::vector<float>>& g) {
  for (std::size_t i = 0; i < g[0].size(); ++i) g[0][i] = static_cast<float>(i);
}
void ExpectTwiceTheGradients(const std::vector<std::vector<float>>& w) {
  int wrong = 0;
  for (std::size_t i = 0; i < w[0].size(); ++i) wrong += w[0][i] != 2.0f * static_cast<float>(i);
  EXPECT_EQ(wrong, 0) << "elements of the weights that are not their gradient's answer";
}

// The first segment is pushed while the engine still holds the copies of the others: a large
// tensor's push starts once its first segment is on the host. (Whole, with segment_bytes 0, the
// tensor could not be pushed before all of it was copied.)
TEST(StagedExchangeSegmentTest, TheFirstSegmentIsPushedWhileTheRestAreStillCopying) {
  constexpr auto kLimit = std::chrono::seconds(20);
  std::vector<std::vector<float>> g, w;
  LocalExchange* local = nullptr;
  auto engine = std::make_shared<SegmentGateEngine>();
  auto made = OverLocal(engine, kLong, g, w, /*answer=*/true, kLimit, &local,
                        {.segment_bytes = kSegmentBytes});
  ASSERT_TRUE(made.ok()) << made.status();
  StagedExchange& x = **made;
  ASSERT_TRUE(x.Init(nullptr).ok());
  NumberGradients(g);
  engine->HoldAllButTheNextCopyToHost();
  ASSERT_TRUE(x.Push(0, nullptr).ok());
  EXPECT_EQ(local->NextPush(kLimit), std::optional<std::uint32_t>(0))
      << "segment 0 was not pushed while the others were still copying";
  EXPECT_EQ(local->NextPush(std::chrono::milliseconds(100)), std::nullopt)
      << "a segment whose copy is held was pushed";
  engine->Release();
  for (std::uint32_t k = 1; k < 4; ++k) EXPECT_EQ(local->NextPush(kLimit), k);
  ASSERT_TRUE(x.Wait(0, nullptr).ok());
  ExpectTwiceTheGradients(w);
  EXPECT_TRUE(x.Close().ok());
}

// The first segment's weights go to the device as soon as they land, while the exchange below
// has not answered the other segments yet; the tensor's Wait returns once all four are there.
TEST(StagedExchangeSegmentTest, ALandedSegmentGoesToTheDeviceBeforeTheRestOfItsTensorLands) {
  constexpr auto kLimit = std::chrono::seconds(20);
  std::vector<std::vector<float>> g, w;
  LocalExchange* local = nullptr;
  auto engine = std::make_shared<SegmentGateEngine>();  // never holds: counts
  auto made = OverLocal(engine, kLong, g, w, /*answer=*/false, kLimit, &local,
                        {.segment_bytes = kSegmentBytes});
  ASSERT_TRUE(made.ok()) << made.status();
  StagedExchange& x = **made;
  ASSERT_TRUE(x.Init(nullptr).ok());
  const int after_init = engine->copies_to_device();
  NumberGradients(g);
  ASSERT_TRUE(x.Push(0, nullptr).ok());
  for (std::uint32_t k = 0; k < 4; ++k) ASSERT_EQ(local->NextPush(kLimit), k);
  local->AnswerPushed(0);
  EXPECT_TRUE(engine->AwaitCopiesToDevice(after_init + 1, kLimit))
      << "segment 0's weights were not copied to the device once they landed";
  for (std::uint32_t k = 1; k < 4; ++k) local->AnswerPushed(k);
  ASSERT_TRUE(x.Wait(0, nullptr).ok());
  EXPECT_EQ(engine->copies_to_device(), after_init + 4);
  ExpectTwiceTheGradients(w);
  EXPECT_TRUE(x.Close().ok());
}

// phub.torch's shape: the hook's thread pushes, a waiter thread waits, each learning of the
// other's progress on its own (here the waiter from the exchange below, as it would from the
// network), with no lock of theirs between a Push and its Wait.
void PushOnOneThreadAndWaitOnAnother(std::shared_ptr<staging::CopyEngine> engine) {
  constexpr int kRounds = 30;
  constexpr auto kLimit = std::chrono::seconds(20);
  std::vector<std::vector<float>> g, w;
  LocalExchange* local = nullptr;
  auto made = OverLocal(std::move(engine), kTensors, g, w, /*answer=*/true, kLimit, &local);
  ASSERT_TRUE(made.ok()) << made.status();
  StagedExchange& x = **made;
  ASSERT_TRUE(x.Init(nullptr).ok());

  std::mutex mu;
  std::condition_variable cv;
  int rounds_waited = 0;  // kRounds + 1: the waiter gave up
  std::vector<std::string> push_errors;
  std::thread pusher([&] {
    for (int r = 0; r < kRounds; ++r) {
      {  // round r's gradients may be written once round r - 1's Waits have returned
        std::unique_lock<std::mutex> lock(mu);
        if (!cv.wait_for(lock, kLimit, [&] { return rounds_waited >= r; })) return;
        if (rounds_waited > kRounds) return;
      }
      for (std::size_t t = kTensors.size(); t-- > 0;) {
        const std::vector<float> grad = Gradient(0, r, t, g[t].size());
        std::copy(grad.begin(), grad.end(), g[t].begin());  // in place: the exchange's buffer
        if (Status s = x.Push(static_cast<std::uint32_t>(t), nullptr); !s.ok()) {
          std::lock_guard<std::mutex> lock(mu);
          push_errors.push_back(absl::StrCat("round ", r, " tensor ", t, ": ", s.ToString()));
        }
      }
    }
  });
  int wrong = 0;
  auto wait_rounds = [&]() -> std::string {
    for (int r = 0; r < kRounds; ++r) {
      for (std::size_t k = 0; k < kTensors.size(); ++k) {
        std::optional<std::uint32_t> t = local->NextPush(kLimit);
        if (!t) return absl::StrCat("round ", r, ": a push never reached the exchange");
        if (Status s = x.Wait(*t, nullptr); !s.ok()) {
          return absl::StrCat("round ", r, " tensor ", *t, ": ", s.ToString());
        }
        const std::vector<float> sent = Gradient(0, r, *t, w[*t].size());
        for (std::size_t i = 0; i < sent.size(); ++i) wrong += w[*t][i] != 2 * sent[i];
      }
      EXPECT_EQ(x.InFlight(), 0u) << "round " << r;
      {
        std::lock_guard<std::mutex> lock(mu);
        rounds_waited = r + 1;
      }
      cv.notify_all();
    }
    return "";
  };
  const std::string waited = wait_rounds();
  {
    std::lock_guard<std::mutex> lock(mu);
    rounds_waited = kRounds + 1;  // a pusher still waiting stops
  }
  cv.notify_all();
  pusher.join();
  EXPECT_EQ(waited, "");
  EXPECT_EQ(wrong, 0) << "elements whose answer did not land";
  EXPECT_THAT(push_errors, ::testing::IsEmpty());
  EXPECT_TRUE(x.Close().ok());
}

// Through the pusher and lander threads, one copy in flight (a GPU's way).
TEST(StagedExchangePushTest, PushOnOneThreadAndWaitOnAnotherLandsEveryAnswer) {
  PushOnOneThreadAndWaitOnAnother(StagingHostEngine(/*max_in_flight=*/1));
}

// Without threads, the device being the host (phub.torch's CPU tensors with PHUB_STAGED=1):
// the caller's two threads meet in the exchange below directly.
TEST(StagedExchangePushTest, PushOnOneThreadAndWaitOnAnotherWhenTheDeviceIsTheHost) {
  PushOnOneThreadAndWaitOnAnother(*staging::MakeHostCopyEngine());
}

#ifdef PHUB_HAVE_CUDA_STAGING
Device CudaDevice() {
  return {[](std::size_t n) {
            float* p = nullptr;
            if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess)
              return static_cast<float*>(nullptr);
            cudaMemset(p, 0xff, n * sizeof(float));  // NaNs: what is never written shows
            return p;
          },
          [](float* to, const float* from, std::size_t n) {
            cudaMemcpy(to, from, n * sizeof(float), cudaMemcpyDefault);
          },
          [](float* p) { cudaFree(p); }};
}

// One rank on a GPU (one GPU: world 1), its gradients and weights in device memory, the
// stream a non-blocking one of the test's: the ring through pinned staging, and NCCL in place.
TEST_F(StagedExchangeTest, OnAGpuStagedAndNcclInPlaceTrainLikeFloat64) {
  auto engine = staging::MakeCudaCopyEngine({.device = 0});
  if (!engine.ok() && engine.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << "no CUDA device: " << engine.status();
  }
  ASSERT_TRUE(engine.ok()) << engine.status();
  std::shared_ptr<staging::CopyEngine> shared = *std::move(engine);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  for (ExchangeKind kind : {ExchangeKind::kRing, ExchangeKind::kNccl}) {
    for (bool scheduled : {false, true}) {  // fixed values, and a schedule's (BeginIteration)
      SCOPED_TRACE(scheduled ? "scheduled" : "fixed values");
      scheduled_ = scheduled;
      std::vector<std::vector<float>> w;
      ASSERT_EQ(TrainRank(0, 1, kind, shared, CudaDevice(), stream, w), "");
      ExpectLikeReference(w, 1);
    }
  }
  cudaStreamDestroy(stream);
}
#else
TEST_F(StagedExchangeTest, OnAGpuStagedAndNcclInPlaceTrainLikeFloat64) {
  GTEST_SKIP() << "this build has no CUDA toolkit (PHUB_HAVE_CUDA_STAGING unset)";
}
#endif

}  // namespace
}  // namespace phub::exchange
