// The TCP rendezvous with well-behaved ranks: N ranks as threads of this process (rank 0 serves
// the store on 127.0.0.1), a late rank 0, deadlines that name what they waited for, and the
// job checks that keep two jobs on one port apart.
#include "phub/rendezvous/tcp_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/support/free_port.h"

namespace phub::rendezvous {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

std::string Msg(const Status& s) { return std::string(s.message()); }

std::string TcpAddressOf(std::uint16_t port, const std::string& job = "") {
  return absl::StrCat("tcp://127.0.0.1:", port, job.empty() ? "" : "/", job);
}

// Every rank publishes its own key, looks up every rank's, and finishes. Rank 0 starts
// `rank0_delay` after the others.
std::vector<Status> RunRanks(std::uint32_t world, const std::string& address,
                             std::chrono::milliseconds rank0_delay = {}) {
  std::vector<Status> status(world);
  std::vector<std::thread> threads;
  for (std::uint32_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      status[r] = [&]() -> Status {
        if (r == 0) std::this_thread::sleep_for(rank0_delay);
        PHUB_ASSIGN_OR_RETURN(auto store, OpenStore({address, r, world, 20000}));
        PHUB_RETURN_IF_ERROR(store->Publish(absl::StrCat("rank", r, ".addr"),
                                            absl::StrCat("host-", r, " ", 1000 + r)));
        for (std::uint32_t peer = 0; peer < world; ++peer) {
          const std::uint32_t q = (r + peer) % world;  // each rank starts with itself
          PHUB_ASSIGN_OR_RETURN(std::string value,
                                store->Lookup(absl::StrCat("rank", q, ".addr"), 20000));
          if (value != absl::StrCat("host-", q, " ", 1000 + q)) {
            return absl::InternalError(absl::StrCat("rank ", r, " read '", value, "' for ", q));
          }
        }
        return store->Finish();
      }();
    });
  }
  for (auto& t : threads) t.join();
  return status;
}

// RunRanks on a port FreeLoopbackPort() found free a moment ago: if another test took it before
// rank 0 listened (ctest runs tests side by side, and phubd's lanes listen on ephemeral ports),
// again on another one; at most 3 tries.
std::vector<Status> RunRanksOnAFreePort(std::uint32_t world,
                                        const std::function<std::string(std::uint16_t)>& address,
                                        std::chrono::milliseconds rank0_delay = {}) {
  std::vector<Status> status;
  for (int attempt = 0; attempt < 3; ++attempt) {
    status = RunRanks(world, address(testing::FreeLoopbackPort()), rank0_delay);
    if (Msg(status[0]).find("Address already in use") == std::string::npos) break;
  }
  return status;
}

class TcpStoreRanks : public ::testing::TestWithParam<std::uint32_t> {};

TEST_P(TcpStoreRanks, EveryRankSeesEveryRanksEntry) {
  const std::uint32_t world = GetParam();
  const auto status =
      RunRanksOnAFreePort(world, [](std::uint16_t port) { return TcpAddressOf(port, "job-1"); });
  for (std::uint32_t r = 0; r < world; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r];
}

INSTANTIATE_TEST_SUITE_P(World, TcpStoreRanks, ::testing::Values(1u, 2u, 8u));

TEST(TcpStore, AHostNameIsServedOnEveryInterface) {
  // "localhost" is a name: rank 0 binds 0.0.0.0, and the ranks reach it through the name.
  const auto status = RunRanksOnAFreePort(
      2, [](std::uint16_t port) { return absl::StrCat("tcp://localhost:", port, "/by-name"); });
  for (std::uint32_t r = 0; r < 2; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r];
}

TEST(TcpStore, RankZeroMayStartAfterTheOthers) {
  const auto start = Clock::now();
  const auto status = RunRanksOnAFreePort(
      4, [](std::uint16_t port) { return TcpAddressOf(port); }, std::chrono::milliseconds(700));
  for (std::uint32_t r = 0; r < 4; ++r) EXPECT_TRUE(status[r].ok()) << r << ": " << status[r];
  EXPECT_GE(Clock::now() - start, std::chrono::milliseconds(700));
}

TEST(TcpStore, ALookupTimingOutNamesTheKeyAndTheAddress) {
  const std::string address = TcpAddressOf(testing::FreeLoopbackPort(), "j");
  auto store = OpenStore({address, 0, 2, 10000});
  ASSERT_TRUE(store.ok()) << store.status();
  const auto start = Clock::now();
  auto value = (*store)->Lookup("rank1.addr", 200);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  ASSERT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded) << value.status();
  EXPECT_THAT(Msg(value.status()), HasSubstr("'rank1.addr'"));
  EXPECT_THAT(Msg(value.status()), HasSubstr(address));
  // The store is still usable after a lookup that found nothing.
  EXPECT_TRUE((*store)->Publish("late", "v").ok());
  EXPECT_EQ(*(*store)->Lookup("late", 100), "v");
}

TEST(TcpStore, NobodyServingTheAddressIsUnavailableNamingIt) {
  const std::uint16_t port = testing::FreeLoopbackPort();
  const auto start = Clock::now();
  auto store = OpenStore({TcpAddressOf(port), 1, 2, 300});
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(3));
  ASSERT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
  EXPECT_THAT(Msg(store.status()), HasSubstr(TcpAddressOf(port)));
  EXPECT_THAT(Msg(store.status()), HasSubstr("is rank 0 running"));
}

TEST(TcpStore, AnotherJobOnTheSamePortIsRefused) {
  const std::uint16_t port = testing::FreeLoopbackPort();
  auto rank0 = OpenStore({TcpAddressOf(port, "job-a"), 0, 3, 10000});
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  auto other_job = OpenStore({TcpAddressOf(port, "job-b"), 1, 3, 2000});
  EXPECT_EQ(other_job.status().code(), absl::StatusCode::kFailedPrecondition) << other_job.status();
  EXPECT_THAT(Msg(other_job.status()), HasSubstr("job id 'job-b'"));
  auto no_job = OpenStore({TcpAddressOf(port), 1, 3, 2000});
  EXPECT_EQ(no_job.status().code(), absl::StatusCode::kFailedPrecondition) << no_job.status();
  auto other_world = OpenStore({TcpAddressOf(port, "job-a"), 1, 4, 2000});
  EXPECT_EQ(other_world.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(other_world.status()), HasSubstr("says 4 ranks"));
  const TcpAddress job_a{"127.0.0.1", port, "job-a"};
  auto outside = TcpStore::Connect(job_a, 5, 3, 2000);
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(outside.status()), HasSubstr("outside the world"));
  // A second process with rank 0's rank (its own client is connected).
  auto twin = TcpStore::Connect(job_a, 0, 3, 2000);
  EXPECT_EQ(twin.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(twin.status()), HasSubstr("already connected"));
}

TEST(TcpStore, RankZerosFinishNamesTheRanksThatNeverCame) {
  const std::uint16_t port = testing::FreeLoopbackPort();
  auto rank0 = OpenStore({TcpAddressOf(port), 0, 3, 800});
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  auto rank1 = OpenStore({TcpAddressOf(port), 1, 3, 800});
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  EXPECT_TRUE((*rank1)->Finish().ok());
  const auto start = Clock::now();
  const Status s = (*rank0)->Finish();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_THAT(Msg(s), HasSubstr("not done: 2"));
}

TEST(TcpStore, ABusyPortIsUnavailableForRankZero) {
  const std::uint16_t port = testing::FreeLoopbackPort();
  auto first = OpenStore({TcpAddressOf(port), 0, 2, 5000});
  ASSERT_TRUE(first.ok()) << first.status();
  auto second = OpenStore({TcpAddressOf(port), 0, 2, 5000});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_THAT(Msg(second.status()), HasSubstr("cannot serve the rendezvous"));
}

TEST(TcpStore, BadKeysAndValuesAreRefusedAndTheStoreStaysUsable) {
  auto store = OpenStore({TcpAddressOf(testing::FreeLoopbackPort()), 0, 1, 5000});
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_EQ((*store)->Publish("a/b", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*store)->Publish("k", std::string(kMaxValueBytes + 1, 'x')).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*store)->Publish("k", std::string(kMaxValueBytes, 'x')).ok());
  EXPECT_EQ((*store)->Lookup("k", 100)->size(), kMaxValueBytes);
  ASSERT_TRUE((*store)->Remove("k").ok());
  EXPECT_EQ((*store)->Lookup("k", 50).status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE((*store)->Finish().ok());
  EXPECT_EQ((*store)->Publish("k", "v").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(TcpStore, AWaitingRankSeesUnavailableWhenRankZeroGoes) {
  const std::uint16_t port = testing::FreeLoopbackPort();
  auto rank0 = OpenStore({TcpAddressOf(port), 0, 2, 20000});
  ASSERT_TRUE(rank0.ok()) << rank0.status();
  auto rank1 = OpenStore({TcpAddressOf(port), 1, 2, 20000});
  ASSERT_TRUE(rank1.ok()) << rank1.status();
  std::thread exits([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    rank0->reset();  // rank 0 fails its set-up and drops the store
  });
  const auto start = Clock::now();
  auto value = (*rank1)->Lookup("never", 15000);
  exits.join();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(value.status().code(), absl::StatusCode::kUnavailable) << value.status();
  EXPECT_THAT(Msg(value.status()), HasSubstr("closed the connection"));
}

}  // namespace
}  // namespace phub::rendezvous
