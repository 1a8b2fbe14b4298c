// NcclAllreduce. Everywhere: options are refused before CUDA is touched, and CudaDeviceCount()
// answers 0 rather than an error without a GPU. On a GPU machine: one rank per visible GPU, as
// threads of this process (gloo's spawn), random inputs against a float64 reference, sum and
// mean, lengths 0, 1, 1000 and 2^20 + 3 (not a multiple of any vector width), several calls in
// a row on the same communicator. Without a GPU those tests skip and say why.
//
// Nothing here calls CUDA at static initialisation: every call is inside a TEST.
#include "phub/nccl/nccl_allreduce.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "phub/nccl/device_buffer.h"
#include "tests/support/free_port.h"

#if defined(__SANITIZE_ADDRESS__)
#define PHUB_NCCL_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PHUB_NCCL_TEST_ASAN 1
#endif
#endif
#if defined(PHUB_NCCL_TEST_ASAN)
// Under ASan the CUDA driver cannot initialise while ASan protects its shadow gap (cuInit fails
// with out-of-memory), so a GPU machine's ASan CI run would fail rather than test. This binary
// only; ASAN_OPTIONS still overrides it.
extern "C" const char* __asan_default_options() { return "protect_shadow_gap=0"; }
#endif

namespace phub::nccl {
namespace {

std::string MakeTempDir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "phub-nccl-XXXXXX").string();
  EXPECT_NE(mkdtemp(pattern.data()), nullptr);
  return pattern;
}

std::string VisibleDevices() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v != nullptr ? v : "(unset)";
}

// ---- Everywhere, GPU or not ----

TEST(NcclConnect, ZeroWorldSizeIsRefusedBeforeTouchingCuda) {
  NcclOptions options;
  options.world_size = 0;
  auto nccl = NcclAllreduce::Connect(options);
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nccl.status().message().find("world_size"), absl::string_view::npos) << nccl.status();
}

TEST(NcclConnect, RankOutsideTheWorldIsRefused) {
  NcclOptions options;
  options.rank = 3;
  options.world_size = 3;
  options.rendezvous = "/tmp";
  auto nccl = NcclAllreduce::Connect(options);
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nccl.status().message().find("rank 3"), absl::string_view::npos) << nccl.status();
}

TEST(NcclConnect, SeveralRanksWithoutARendezvousDirectoryAreRefused) {
  NcclOptions options;
  options.world_size = 2;
  auto nccl = NcclAllreduce::Connect(options);
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nccl.status().message().find("rendezvous"), absl::string_view::npos)
      << nccl.status();
}

TEST(NcclConnect, NonPositiveTimeoutAndNegativeDeviceAreRefused) {
  NcclOptions options;
  options.timeout_ms = 0;
  EXPECT_EQ(NcclAllreduce::Connect(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.timeout_ms = 1000;
  options.device = -2;
  EXPECT_EQ(NcclAllreduce::Connect(options).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaDeviceCount, IsOkWithOrWithoutAGpu) {
  auto count = CudaDeviceCount();
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_GE(*count, 0);
  RecordProperty("cuda_devices", *count);
}

TEST(NcclConnect, WithoutAGpuFailsWithFailedPreconditionSayingSo) {
  auto count = CudaDeviceCount();
  ASSERT_TRUE(count.ok()) << count.status();
  if (*count > 0) GTEST_SKIP() << "this machine has " << *count << " CUDA device(s)";
  auto nccl = NcclAllreduce::Connect(NcclOptions{});
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(nccl.status().message().find("no CUDA device"), absl::string_view::npos)
      << nccl.status();
}

TEST(DeviceBuffer, CopyOfAnotherSizeIsRefused) {
  auto buffer = DeviceBuffer::Allocate(0, 0);  // allocates nothing, so needs no GPU
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  std::vector<float> host(3);
  EXPECT_EQ(buffer->CopyFromHost(host).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(buffer->CopyToHost(host).code(), absl::StatusCode::kInvalidArgument);
}

// ---- On a GPU machine ----

class NcclGpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto count = CudaDeviceCount();
    ASSERT_TRUE(count.ok()) << count.status();
    if (*count == 0) {
      GTEST_SKIP() << "no CUDA device: CudaDeviceCount() is 0 (no NVIDIA driver, or no GPU "
                      "visible; CUDA_VISIBLE_DEVICES="
                   << VisibleDevices() << ")";
    }
    devices_ = *count;
  }
  int devices_ = 0;
};

struct Call {
  std::size_t length;
  ReduceOp op;
};

TEST_F(NcclGpuTest, MatchesTheFloat64ReferenceOnEveryRankCallAfterCall) {
  const std::uint32_t world = static_cast<std::uint32_t>(devices_);  // one rank per GPU
  std::vector<Call> calls;
  for (int repeat = 0; repeat < 2; ++repeat) {
    for (std::size_t length :
         {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{(1 << 20) + 3}}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMean}) calls.push_back({length, op});
    }
  }
  // inputs[call][rank][i]; each rank thread writes only outputs[*][its rank].
  std::mt19937 rng(20261122 + world);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<std::vector<std::vector<float>>> inputs(calls.size());
  for (std::size_t k = 0; k < calls.size(); ++k) {
    inputs[k].assign(world, std::vector<float>(calls[k].length));
    for (auto& rank : inputs[k])
      for (float& v : rank) v = uniform(rng);
  }
  std::vector<std::vector<std::vector<float>>> outputs = inputs;
  const std::string dir = MakeTempDir();
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      status[r] = [&]() -> Status {
        NcclOptions options;
        options.rank = r;
        options.world_size = world;
        options.rendezvous = dir;
        options.timeout_ms = 60000;
        PHUB_ASSIGN_OR_RETURN(auto nccl, NcclAllreduce::Connect(options));
        if (nccl->device() != static_cast<int>(r)) {
          return absl::InternalError("device is not rank % devices");
        }
        for (std::size_t k = 0; k < calls.size(); ++k) {
          PHUB_ASSIGN_OR_RETURN(DeviceBuffer buffer,
                                DeviceBuffer::Allocate(nccl->device(), calls[k].length));
          PHUB_RETURN_IF_ERROR(buffer.CopyFromHost(inputs[k][r]));
          PHUB_RETURN_IF_ERROR(nccl->Allreduce(buffer.data(), buffer.size(), calls[k].op));
          PHUB_RETURN_IF_ERROR(buffer.CopyToHost(outputs[k][r]));
        }
        return absl::OkStatus();
      }();
    });
  }
  for (auto& t : threads) t.join();
  std::filesystem::remove_all(dir);
  for (std::uint32_t r = 0; r < world; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  }

  for (std::size_t k = 0; k < calls.size(); ++k) {
    const bool mean = calls[k].op == ReduceOp::kMean;
    for (std::size_t i = 0; i < calls[k].length; ++i) {
      double expected = 0, magnitude = 0;
      for (std::uint32_t r = 0; r < world; ++r) {
        expected += inputs[k][r][i];
        magnitude += std::fabs(inputs[k][r][i]);
      }
      if (mean) {
        expected /= world;
        magnitude /= world;
      }
      // float32 accumulation of `world` terms, in whatever order NCCL's algorithm picks.
      const double tolerance = 4 * world * 6e-8 * magnitude + 1e-30;
      for (std::uint32_t r = 0; r < world; ++r) {
        ASSERT_NEAR(outputs[k][r][i], expected, tolerance)
            << "call " << k << (mean ? " mean" : " sum") << " length " << calls[k].length
            << " rank " << r << " element " << i;
      }
    }
  }
}

TEST_F(NcclGpuTest, NullBufferIsRefusedAndTheCommunicatorStaysUsable) {
  NcclOptions options;  // one rank, no rendezvous needed
  auto nccl = NcclAllreduce::Connect(options);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  EXPECT_EQ((*nccl)->Allreduce(nullptr, 10).code(), absl::StatusCode::kInvalidArgument);
  auto buffer = DeviceBuffer::Allocate((*nccl)->device(), 3);
  ASSERT_TRUE(buffer.ok()) << buffer.status();
  const std::vector<float> in = {1.5f, -2.0f, 3.25f};
  ASSERT_TRUE(buffer->CopyFromHost(in).ok());
  ASSERT_TRUE((*nccl)->Allreduce(buffer->data(), 3, ReduceOp::kMean).ok());
  std::vector<float> out(3);
  ASSERT_TRUE(buffer->CopyToHost(out).ok());
  EXPECT_EQ(out, in);  // the mean over one rank is the input, exactly
}

// The compact types (--wire): bf16 and fp16 elements are reduced as such (one rank: the mean
// is the input, bit for bit; a float32 reading of the same bytes would garble it).
TEST_F(NcclGpuTest, CompactTypesAreReducedInTheirOwnFormat) {
  NcclOptions options;
  auto nccl = NcclAllreduce::Connect(options);
  ASSERT_TRUE(nccl.ok()) << nccl.status();
  for (kernels::WireFormat format : {kernels::WireFormat::kBf16, kernels::WireFormat::kFp16}) {
    const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.125f, -7.0f};
    std::vector<float> packed(3, 0.0f);  // 5 two-byte elements in whole floats
    kernels::ConvertToWire(format, values, reinterpret_cast<std::byte*>(packed.data()));
    auto buffer = DeviceBuffer::Allocate((*nccl)->device(), packed.size());
    ASSERT_TRUE(buffer.ok()) << buffer.status();
    ASSERT_TRUE(buffer->CopyFromHost(packed).ok());
    ASSERT_TRUE((*nccl)->Allreduce(buffer->data(), values.size(), format, ReduceOp::kMean).ok());
    std::vector<float> out_packed(3), out(values.size());
    ASSERT_TRUE(buffer->CopyToHost(out_packed).ok());
    kernels::ConvertFromWire(format, reinterpret_cast<const std::byte*>(out_packed.data()), out);
    EXPECT_EQ(out, values) << kernels::WireFormatName(format);
  }
}

TEST_F(NcclGpuTest, DeviceThatDoesNotExistIsRefused) {
  NcclOptions options;
  options.device = devices_;
  auto nccl = NcclAllreduce::Connect(options);
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nccl.status().message().find("does not exist"), absl::string_view::npos)
      << nccl.status();
}

TEST_F(NcclGpuTest, MissingRankZeroTimesOutNamingTheIdFile) {
  const std::string dir = MakeTempDir();
  NcclOptions options;
  options.rank = 1;
  options.world_size = 2;
  options.rendezvous = dir;
  options.timeout_ms = 200;
  auto nccl = NcclAllreduce::Connect(options);
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(nccl.status().message().find("nccl.id"), absl::string_view::npos) << nccl.status();
  std::filesystem::remove_all(dir);
}

// Over the TCP rendezvous: a missing rank 0 is a server nobody answers at the address.
TEST_F(NcclGpuTest, MissingRankZeroOverTcpIsUnavailableNamingTheAddress) {
  NcclOptions options;
  options.rank = 1;
  options.world_size = 2;
  options.rendezvous = absl::StrCat("tcp://127.0.0.1:", testing::FreeLoopbackPort());
  options.timeout_ms = 300;
  auto nccl = NcclAllreduce::Connect(options);
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kUnavailable) << nccl.status();
  EXPECT_NE(nccl.status().message().find(options.rendezvous), absl::string_view::npos)
      << nccl.status();
}

// Rank 0 serves the id; with no rank 1 joining, the join times out naming the rendezvous.
TEST_F(NcclGpuTest, RankZeroAloneOverTcpTimesOutJoining) {
  NcclOptions options;
  options.rank = 0;
  options.world_size = 2;
  options.rendezvous = absl::StrCat("tcp://127.0.0.1:", testing::FreeLoopbackPort());
  options.timeout_ms = 1500;
  auto nccl = NcclAllreduce::Connect(options);
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kDeadlineExceeded) << nccl.status();
  EXPECT_NE(nccl.status().message().find(options.rendezvous), absl::string_view::npos)
      << nccl.status();
}

}  // namespace
}  // namespace phub::nccl
