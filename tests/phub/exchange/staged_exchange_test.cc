// The staging pipeline (phub/exchange/staged_exchange.h) over a real exchange: two ranks of the
// TCP ring in this process, each serving its "device" buffers through a copy engine. With the
// host engine staging for real (distinct buffers, one copy in flight at a time: back-pressure
// on every push) and with the CPU worker's engine (no copies), training steps exactly like a
// float64 reference of synchronous SGD with momentum; a second Push before Wait is refused; a
// peer that leaves fails the survivor's next call, never hangs it. On a GPU the same through
// the CUDA engine, and `--comm nccl` in place on the device (skipped elsewhere, saying why).
#include "phub/exchange/staged_exchange.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <functional>
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

// Momentum SGD on the mean gradient in float64, from rank 0's weights.
std::vector<std::vector<double>> Reference(int world) {
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
      for (std::size_t i = 0; i < mean.size(); ++i) {
        v[t][i] = kMomentum * v[t][i] + mean[i];
        w[t][i] -= kLr * v[t][i];
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
    auto run = [&]() -> Status {
      PHUB_ASSIGN_OR_RETURN(
          auto x, MakeDeviceExchange(Options(rank, world, kind), engine, kTensors, grads, weights));
      PHUB_RETURN_IF_ERROR(x->Init(stream));
      for (int s = 0; s < kSteps; ++s) {
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
    const auto want = Reference(world);
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
};

TEST_F(StagedExchangeTest, StagedThroughRealCopiesOneInFlightTrainsLikeFloat64) {
  TrainTwoRanks([] {
    return std::shared_ptr<staging::CopyEngine>(
        *staging::MakeHostCopyEngine({.max_in_flight = 1, .separate_device = true}));
  });
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
    std::vector<std::vector<float>> w;
    ASSERT_EQ(TrainRank(0, 1, kind, shared, CudaDevice(), stream, w), "");
    ExpectLikeReference(w, 1);
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
