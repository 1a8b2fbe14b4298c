// The copy engines (phub/staging): the host engine on every machine; the CUDA engine on a GPU
// (skipped, saying why, elsewhere). Copies land whole, in order, after the fences they name;
// back-pressure bounds what is queued; bad calls are refused, naming what was wrong.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "phub/staging/host_copy_engine.h"
#ifdef PHUB_HAVE_CUDA_STAGING
#include <cuda_runtime.h>

#include "phub/staging/cuda_copy_engine.h"
#endif

namespace phub::staging {
namespace {

using std::chrono::milliseconds;
using ::testing::HasSubstr;

std::vector<float> Random(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// A round trip through an engine, many copies queued at once, each to-device copy ordered
// after the to-host copy it reads: whatever the engine, the bytes come back as they went.
void RoundTrips(CopyEngine& engine, float* device_a, float* device_b, std::size_t n, int copies) {
  auto staging = engine.AllocateStaging(n);
  ASSERT_TRUE(staging.ok()) << staging.status();
  float* host = staging->span().data();
  Fence last;
  for (int i = 0; i < copies; ++i) {
    // a -> host -> b, then b -> host -> a: each copy must see the previous one's bytes.
    const bool forward = i % 2 == 0;
    auto up = engine.ToHost(forward ? device_a : device_b, host, n, last);
    ASSERT_TRUE(up.ok()) << up.status();
    auto down = engine.ToDevice(host, forward ? device_b : device_a, n, *up);
    ASSERT_TRUE(down.ok()) << down.status();
    last = *down;
  }
  ASSERT_TRUE(engine.HostWait(last, milliseconds(20000)).ok());
}

TEST(HostCopyEngineTest, CopiesLandWholeInOrderUnderBackPressure) {
  for (std::size_t limit : {std::size_t{1}, std::size_t{3}, std::size_t{256}}) {
    auto engine = MakeHostCopyEngine({.max_in_flight = limit, .separate_device = true});
    ASSERT_TRUE(engine.ok()) << engine.status();
    EXPECT_FALSE((*engine)->DeviceIsHost());
    const std::size_t n = 100003;
    std::vector<float> a = Random(n, 7), b(n, std::nanf("")), expected = a;
    RoundTrips(**engine, a.data(), b.data(), n, 41);  // odd: ends a -> b
    EXPECT_EQ(b, expected) << "limit " << limit;
  }
}

TEST(HostCopyEngineTest, TheCpuWorkersEngineMovesNothingAndRefusesBadCalls) {
  auto engine = MakeHostCopyEngine();
  ASSERT_TRUE(engine.ok());
  EXPECT_TRUE((*engine)->DeviceIsHost());
  std::vector<float> a = Random(10, 3), expected = a;
  auto same = (*engine)->ToHost(a.data(), a.data(), a.size(), {});
  ASSERT_TRUE(same.ok());
  ASSERT_TRUE((*engine)->HostWait(*same, milliseconds(5000)).ok());
  EXPECT_EQ(a, expected);
  auto null = (*engine)->ToDevice(nullptr, a.data(), 4, {});
  EXPECT_EQ(null.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(null.status().message()), HasSubstr("null source"));
  auto none = MakeHostCopyEngine({.max_in_flight = 0});
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("max_in_flight is 0"));
}

// Its "device" is host memory: nothing for a NIC to import as a dma-buf, and nothing to flush.
TEST(HostCopyEngineTest, ExportsNoDmaBufSayingWhy) {
  for (bool separate : {false, true}) {
    auto engine = MakeHostCopyEngine({.separate_device = separate});
    ASSERT_TRUE(engine.ok()) << engine.status();
    std::vector<float> a(1024);
    auto exported = (*engine)->ExportDmaBuf(a.data(), a.size() * sizeof(float));
    EXPECT_EQ(exported.status().code(), absl::StatusCode::kUnimplemented) << exported.status();
    EXPECT_THAT(std::string(exported.status().message()),
                HasSubstr("no device memory to export for a NIC"));
    EXPECT_TRUE((*engine)->FlushRemoteWrites().ok());
  }
}

#ifdef PHUB_HAVE_CUDA_STAGING
// On a GPU: two device buffers, pinned staging, copies on the engine's streams, and a consumer
// stream made to wait for the last copy on the device (no host wait before its own copy).
TEST(CudaCopyEngineTest, RoundTripsThroughPinnedStagingAndOrdersAConsumerStream) {
  auto engine = MakeCudaCopyEngine({.device = 0, .max_in_flight = 2});
  if (!engine.ok() && engine.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << "no CUDA device: " << engine.status();
  }
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::size_t n = 1 << 20;
  float *a = nullptr, *b = nullptr;
  ASSERT_EQ(cudaMalloc(&a, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, n * sizeof(float)), cudaSuccess);
  const std::vector<float> input = Random(n, 11);
  ASSERT_EQ(cudaMemcpy(a, input.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_EQ(cudaMemset(b, 0xff, n * sizeof(float)), cudaSuccess);  // NaNs: unwritten shows
  RoundTrips(**engine, a, b, n, 9);
  cudaStream_t consumer;
  ASSERT_EQ(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking), cudaSuccess);
  auto staging = (*engine)->AllocateStaging(n);
  ASSERT_TRUE(staging.ok());
  auto up = (*engine)->ToHost(b, staging->span().data(), n, {});
  ASSERT_TRUE(up.ok());
  ASSERT_TRUE((*engine)->StreamWait(consumer, *up).ok());
  std::vector<float> out(n);
  ASSERT_EQ(cudaMemcpyAsync(out.data(), staging->span().data(), n * sizeof(float),
                            cudaMemcpyHostToHost, consumer),
            cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(consumer), cudaSuccess);
  EXPECT_EQ(out, input);
  cudaStreamDestroy(consumer);
  cudaFree(a);
  cudaFree(b);
}

// On a GPU: device memory exported as a dma-buf (the allocation, with the range's offset in it),
// or Unimplemented saying why where the GPU or driver cannot (a consumer GPU, the proprietary
// kernel module); a NIC's writes flushed either way.
TEST(CudaCopyEngineTest, ExportsDeviceMemoryAsADmaBufOrSaysWhyNot) {
  auto engine = MakeCudaCopyEngine({.device = 0});
  if (!engine.ok() && engine.status().code() == absl::StatusCode::kFailedPrecondition) {
    GTEST_SKIP() << "no CUDA device: " << engine.status();
  }
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::size_t bytes = 1 << 20;
  char* a = nullptr;
  ASSERT_EQ(cudaMalloc(&a, bytes), cudaSuccess);
  // cudaMalloc's blocks start on a page normally; the export is page-aligned in any case.
  const std::uint64_t lead = reinterpret_cast<std::uintptr_t>(a) % ::sysconf(_SC_PAGESIZE);
  auto whole = (*engine)->ExportDmaBuf(a, bytes);
  if (whole.ok()) {
    EXPECT_GE(whole->fd(), 0);
    EXPECT_EQ(whole->offset(), lead);
    auto inner = (*engine)->ExportDmaBuf(a + 4096, bytes - 4096);
    ASSERT_TRUE(inner.ok()) << inner.status();
    EXPECT_GE(inner->fd(), 0);
    EXPECT_EQ(inner->offset(), lead + 4096);
    auto past = (*engine)->ExportDmaBuf(a + 4096, bytes);
    EXPECT_EQ(past.status().code(), absl::StatusCode::kInvalidArgument) << past.status();
  } else {
    EXPECT_EQ(whole.status().code(), absl::StatusCode::kUnimplemented) << whole.status();
    EXPECT_THAT(std::string(whole.status().message()), HasSubstr("staging through host memory"));
  }
  std::vector<float> host(16);
  auto not_device = (*engine)->ExportDmaBuf(host.data(), sizeof(float) * host.size());
  EXPECT_EQ(not_device.status().code(), absl::StatusCode::kUnimplemented) << not_device.status();
  EXPECT_TRUE((*engine)->FlushRemoteWrites().ok());
  cudaFree(a);
}

// Checked before any device is touched: runs without a GPU too.
TEST(CudaCopyEngineTest, ABackpressureTimeoutThatIsNotPositiveIsRefused) {
  for (milliseconds t : {milliseconds(0), milliseconds(-5)}) {
    auto engine = MakeCudaCopyEngine({.device = 0, .backpressure_timeout = t});
    EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument) << engine.status();
    EXPECT_THAT(std::string(engine.status().message()),
                HasSubstr("backpressure_timeout is " + std::to_string(t.count()) + " ms"));
  }
}
#else
TEST(CudaCopyEngineTest, RoundTripsThroughPinnedStagingAndOrdersAConsumerStream) {
  GTEST_SKIP() << "this build has no CUDA toolkit (PHUB_HAVE_CUDA_STAGING unset)";
}
TEST(CudaCopyEngineTest, ExportsDeviceMemoryAsADmaBufOrSaysWhyNot) {
  GTEST_SKIP() << "this build has no CUDA toolkit (PHUB_HAVE_CUDA_STAGING unset)";
}
#endif

}  // namespace
}  // namespace phub::staging
