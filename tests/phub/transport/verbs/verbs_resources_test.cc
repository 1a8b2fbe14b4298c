// The verbs building blocks on a real RDMA device (soft-RoCE in tests/verbs/'s guest, or an
// HCA): two RC queue pairs in one process connected to each other; RDMA WRITE WITH IMMEDIATE of
// random bytes lands exactly where the writer said with the immediate delivered; a write outside
// the peer's region fails with a completion error that says so; a QP put in error flushes its
// posted receives; the registry tells device memory from host memory. Without a device those
// tests skip, saying why; the no-device error runs everywhere.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <random>
#include <vector>

#include "phub/transport/verbs/memory_region.h"
#include "phub/transport/verbs/memory_registry.h"
#include "phub/transport/verbs/queue_pair.h"
#include "phub/transport/verbs/verbs_device.h"

namespace phub::transport::verbs {
namespace {

using ::testing::HasSubstr;

constexpr char kSkip[] =
    "no RDMA device here: tests/verbs/run_in_guest.sh runs these in a QEMU guest with soft-RoCE";

TEST(VerbsDeviceTest, NoDeviceOrAnUnknownOneIsAClearError) {
  if (ListDevices().empty()) {
    auto device = VerbsDevice::Open({});
    ASSERT_FALSE(device.ok());
    EXPECT_EQ(device.status().code(), absl::StatusCode::kNotFound);
    EXPECT_THAT(std::string(device.status().message()), HasSubstr("no RDMA device"));
    return;
  }
  DeviceOptions options;
  options.device = "no-such-hca";
  auto device = VerbsDevice::Open(options);
  ASSERT_FALSE(device.ok());
  EXPECT_THAT(std::string(device.status().message()), HasSubstr(ListDevices()[0]));
}

TEST(VerbsDeviceTest, BadPortOrGidIndexIsRefused) {
  if (ListDevices().empty()) GTEST_SKIP() << kSkip;
  DeviceOptions options;
  options.port = 0;
  EXPECT_EQ(VerbsDevice::Open(options).status().code(), absl::StatusCode::kInvalidArgument);
  options.port = 9;
  EXPECT_EQ(VerbsDevice::Open(options).status().code(), absl::StatusCode::kNotFound);
  options.port = 1;
  options.gid_index = 100000;
  auto gid = VerbsDevice::Open(options);
  EXPECT_THAT(std::string(gid.status().message()), HasSubstr("outside"));
}

// Two QPs on one device, connected to each other, each with its own CQ.
class QueuePairPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ListDevices().empty()) GTEST_SKIP() << kSkip;
    auto device = VerbsDevice::Open({});
    ASSERT_TRUE(device.ok()) << device.status();
    device_ = std::move(*device);
    for (auto* cq : {&cq_a_, &cq_b_}) {
      auto made = CompletionQueue::Create(*device_, 64);
      ASSERT_TRUE(made.ok()) << made.status();
      *cq = std::move(*made);
    }
    auto a = QueuePair::Create(*device_, *cq_a_, *cq_a_);
    auto b = QueuePair::Create(*device_, *cq_b_, *cq_b_);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    a_ = std::move(*a);
    b_ = std::move(*b);
    ASSERT_TRUE(a_->Connect(b_->address()).ok());
    ASSERT_TRUE(b_->Connect(a_->address()).ok());
  }

  // Waits (up to 10 s: soft-RoCE under emulation is slow) for one completion on `cq`.
  static ibv_wc WaitOne(CompletionQueue& cq) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    ibv_wc wc{};
    while (std::chrono::steady_clock::now() < deadline) {
      auto n = cq.Poll(std::span<ibv_wc>(&wc, 1));
      EXPECT_TRUE(n.ok()) << n.status();
      if (!n.ok() || *n == 1) return wc;
    }
    ADD_FAILURE() << "no completion within 10 s";
    wc.status = IBV_WC_GENERAL_ERR;
    return wc;
  }

  std::unique_ptr<VerbsDevice> device_;
  std::unique_ptr<CompletionQueue> cq_a_, cq_b_;
  std::unique_ptr<QueuePair> a_, b_;
};

TEST_F(QueuePairPairTest, WriteWithImmediateLandsWhereTheWriterSaid) {
  // 1 MiB + 12 bytes of random data, written at an odd offset into a larger target.
  std::mt19937 rng(11);
  std::vector<std::byte> source((1 << 20) + 12), target((2 << 20), std::byte{0});
  for (auto& b : source) b = static_cast<std::byte>(rng());
  auto src = MemoryRegion::Register(*device_, source, 0);
  auto dst = MemoryRegion::Register(*device_, target, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src.ok()) << src.status();
  ASSERT_TRUE(dst.ok()) << dst.status();
  constexpr std::size_t kOffset = 4096 + 8;
  for (int round = 0; round < 3; ++round) {  // the same regions reused, as slots are
    ASSERT_TRUE(b_->PostReceive(100 + round).ok());
    const std::uint32_t imm = 0xC0FFEE00u + round;
    ASSERT_TRUE(a_->PostWriteWithImm(*src, source, dst->remote_address(kOffset), dst->rkey(), imm,
                                     round).ok());
    ibv_wc sent = WaitOne(*cq_a_);
    ASSERT_EQ(sent.status, IBV_WC_SUCCESS) << CompletionError(sent);
    EXPECT_EQ(sent.wr_id, static_cast<std::uint64_t>(round));
    ibv_wc got = WaitOne(*cq_b_);
    ASSERT_EQ(got.status, IBV_WC_SUCCESS) << CompletionError(got);
    EXPECT_EQ(got.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
    EXPECT_EQ(got.wr_id, static_cast<std::uint64_t>(100 + round));
    EXPECT_EQ(ntohl(got.imm_data), imm);
    EXPECT_EQ(got.byte_len, source.size());
    EXPECT_EQ(std::memcmp(target.data() + kOffset, source.data(), source.size()), 0);
    EXPECT_EQ(target[kOffset - 1], std::byte{0});  // nothing before the target range
    EXPECT_EQ(target[kOffset + source.size()], std::byte{0});  // nor after it
    source[round] ^= std::byte{0xff};  // the next round must carry the new bytes
  }
}

TEST_F(QueuePairPairTest, AWriteOutsideThePeersRegionFailsSayingSo) {
  std::vector<std::byte> source(4096), target(4096);
  auto src = MemoryRegion::Register(*device_, source, 0);
  auto dst = MemoryRegion::Register(*device_, target, IBV_ACCESS_REMOTE_WRITE);
  ASSERT_TRUE(src.ok() && dst.ok());
  ASSERT_TRUE(b_->PostReceive(1).ok());
  ASSERT_TRUE(a_->PostWriteWithImm(*src, source, dst->remote_address(2048), dst->rkey(), 7, 1).ok());
  ibv_wc sent = WaitOne(*cq_a_);
  EXPECT_NE(sent.status, IBV_WC_SUCCESS);
  EXPECT_THAT(CompletionError(sent), HasSubstr(ibv_wc_status_str(sent.status)));
}

// What a core does when the control plane says a worker is gone: its QP goes to the error
// state and every receive still posted on it comes back flushed, so no slot stays claimed.
// (soft-RoCE never times out a write to a destroyed peer QP — 90 s measured — so a dead peer is
// detected through the control connection, not through the HCA's retries.)
TEST_F(QueuePairPairTest, AQueuePairPutInErrorFlushesItsPostedReceives) {
  ASSERT_TRUE(b_->PostReceive(41).ok());
  ASSERT_TRUE(b_->PostReceive(42).ok());
  ASSERT_TRUE(b_->SetError().ok());
  for (std::uint64_t id : {41, 42}) {
    ibv_wc flushed = WaitOne(*cq_b_);
    EXPECT_EQ(flushed.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(flushed.wr_id, id);
    EXPECT_THAT(CompletionError(flushed), HasSubstr("flushed"));
  }
}

TEST_F(QueuePairPairTest, ABufferOutsideItsRegionIsRefusedBeforePosting) {
  std::vector<std::byte> source(4096), other(16);
  auto src = MemoryRegion::Register(*device_, source, 0);
  ASSERT_TRUE(src.ok());
  auto s = a_->PostWriteWithImm(*src, other, 0, 0, 0, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

// The registry's view of device memory (GPUDirect), what the connections' guards ask before
// any copy. Host memory registered as if it were device memory stands in for a GPU's (no
// machine here has a GPU and an HCA; the dma-buf registration itself is tested through the
// transport seam, in connection_conformance_test.cc).
class MemoryRegistryDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ListDevices().empty()) GTEST_SKIP() << kSkip;
    auto device = VerbsDevice::Open({});
    ASSERT_TRUE(device.ok()) << device.status();
    registry_.emplace(std::shared_ptr<const VerbsDevice>(std::move(*device)));
  }
  std::optional<MemoryRegistry> registry_;
};

TEST_F(MemoryRegistryDeviceTest, AnyOverlapWithDeviceMemoryIsSeenAndHostMemoryIsNot) {
  std::vector<std::byte> memory(3 * 4096);
  std::span<std::byte> all(memory);
  std::span<std::byte> host = all.first(4096);
  std::span<std::byte> device = all.subspan(4096, 4096);  // the tail stays unregistered
  ASSERT_TRUE(registry_->Register(host).ok());
  EXPECT_FALSE(registry_->InDeviceMemory(host.data(), host.size()));  // none registered yet
  ASSERT_TRUE(registry_->TEST_RegisterAsDeviceMemory(device).ok());

  EXPECT_TRUE(registry_->InDeviceMemory(device.data(), device.size()));
  EXPECT_TRUE(registry_->InDeviceMemory(device.data() + 100, 8));                // inside
  EXPECT_TRUE(registry_->InDeviceMemory(host.data() + 4000, 200));               // its start
  EXPECT_TRUE(registry_->InDeviceMemory(device.data() + 4000, 200));             // its end
  EXPECT_TRUE(registry_->InDeviceMemory(all.data(), all.size()));                // around it
  EXPECT_FALSE(registry_->InDeviceMemory(host.data(), host.size()));             // before it
  EXPECT_FALSE(registry_->InDeviceMemory(device.data() + device.size(), 4096));  // after it
  EXPECT_FALSE(registry_->InDeviceMemory(device.data() + 8, 0));                 // no bytes
  // Found like host memory (a payload inside it is sent zero-copy), flagged as device memory.
  const MemoryRegion* found = registry_->Find(device.data() + 8, 64);
  ASSERT_NE(found, nullptr);
  EXPECT_TRUE(found->device_memory());
  EXPECT_EQ(found->data(), device.data());
  EXPECT_EQ(found->remote_address(8), reinterpret_cast<std::uint64_t>(device.data() + 8));
  EXPECT_FALSE(registry_->Find(host.data(), 64)->device_memory());
}

TEST_F(MemoryRegistryDeviceTest, ForgottenDeviceMemoryIsNoLongerGuarded) {
  std::vector<std::byte> memory(4096);
  ASSERT_TRUE(registry_->TEST_RegisterAsDeviceMemory(memory).ok());
  ASSERT_TRUE(registry_->InDeviceMemory(memory.data(), memory.size()));
  registry_->Forget(memory);
  EXPECT_FALSE(registry_->InDeviceMemory(memory.data(), memory.size()));
  EXPECT_EQ(registry_->regions(), 0u);
  EXPECT_EQ(registry_->registered_bytes(), 0u);
}

TEST_F(MemoryRegistryDeviceTest, DeviceMemoryWithoutADmaBufIsRefusedNamingTheDevice) {
  std::vector<std::byte> memory(4096);
  Status status = registry_->RegisterDevice({memory, -1, 0});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(registry_->device().name()));
  EXPECT_EQ(registry_->regions(), 0u);
}

}  // namespace
}  // namespace phub::transport::verbs

namespace phub::transport::verbs {
namespace {

// A process whose locked-memory limit is too low gets the memlock explanation, for real: a
// child lowers RLIMIT_MEMLOCK, gives up root (root's CAP_IPC_LOCK ignores the limit) and
// registers 8 MiB. The child reports through its exit code: 0 = the error said what it must.
TEST(VerbsMemlockTest, TooLowALimitIsAnErrorSayingHowToRaiseIt) {
  if (ListDevices().empty()) GTEST_SKIP() << kSkip;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    rlimit small{64 * 1024, 64 * 1024};
    if (setrlimit(RLIMIT_MEMLOCK, &small) != 0) _exit(10);
    if (getuid() == 0 && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(11);
    auto device = VerbsDevice::Open({});
    if (!device.ok()) _exit(12);  // e.g. /dev/infiniband not open to others
    std::vector<std::byte> memory(8 << 20);
    auto region = MemoryRegion::Register(**device, memory, IBV_ACCESS_REMOTE_WRITE);
    if (region.ok()) _exit(13);
    const std::string message(region.status().message());
    const bool says_what = region.status().code() == absl::StatusCode::kResourceExhausted &&
                           message.find("ulimit -l") != std::string::npos &&
                           message.find("65536 bytes") != std::string::npos;
    if (!says_what) std::fprintf(stderr, "memlock error was: %s\n", message.c_str());
    _exit(says_what ? 0 : 14);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 12) GTEST_SKIP() << "the device cannot be opened without root here";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child exit codes: 10 setrlimit, 11 setuid, 13 the "
                                       "registration succeeded, 14 the message (on stderr)";
}

}  // namespace
}  // namespace phub::transport::verbs
