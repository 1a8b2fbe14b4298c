// Tensor storage: what cannot be allocated is a Status (ResourceExhausted where memory ran out),
// not an exception.
#include "worker/tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "tests/worker/status_testing.h"

// Under AddressSanitizer an allocation larger than it supports aborts by default; the test of
// a host allocation failing wants the null that the C library returns instead.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }

namespace phub::worker {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

TEST(TensorTest, AllocateGivesAlignedHostStorageOfTheShape) {
  PHUB_ASSERT_OK_AND_ASSIGN(Tensor t, Tensor::Allocate({3, 5}));
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.device(), Device::kCpu);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(t.data()) % 64, 0u);
  PHUB_ASSERT_OK_AND_ASSIGN(Tensor empty, Tensor::Allocate({0, 4}));
  EXPECT_TRUE(empty.defined());
  EXPECT_EQ(empty.numel(), 0);
}

TEST(TensorTest, ANegativeDimensionIsRefused) {
  EXPECT_THAT(Tensor::Allocate({2, -1}), StatusIs(absl::StatusCode::kInvalidArgument,
                                                  HasSubstr("negative dimension in [2, -1]")));
}

TEST(TensorTest, HostMemoryThatCannotBeHadIsResourceExhausted) {
  // 2^46 floats: 256 TiB, more than any machine this runs on has or overcommits.
  EXPECT_THAT(Tensor::Allocate({std::int64_t{1} << 46}),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("cannot allocate 281474976710656 bytes of host memory")));
}

TEST(TensorTest, DeviceTensorsNeedAnInstalledAllocatorAndReportItsFailure) {
  EXPECT_THAT(
      Tensor::Allocate({4}, Device::kCuda),
      StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("no device allocator installed")));
  EXPECT_THAT(SetDeviceAllocator(Device::kCpu, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("only cuda")));
  // A device out of memory, as the cuDNN backend's allocator reports it.
  PHUB_ASSERT_OK(SetDeviceAllocator(
      Device::kCuda, {.allocate = [](std::size_t bytes) -> StatusOr<void*> {
                        return absl::ResourceExhaustedError(
                            "cudaMallocAsync: out of GPU memory for " + std::to_string(bytes));
                      },
                      .free = [](void*) {}}));
  EXPECT_THAT(Tensor::Allocate({4, 8}, Device::kCuda),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("Tensor [4, 8] on cuda: cudaMallocAsync: out of GPU memory for "
                                 "128")));
  PHUB_ASSERT_OK(SetDeviceAllocator(Device::kCuda, {}));
}

}  // namespace
}  // namespace phub::worker
