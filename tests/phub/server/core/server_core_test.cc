// ServerCore's lanes (core_lane.h): each job on a core runs on a thread of its own with a data
// port of its own; with --data-port-base a job takes the first free port of its core's range,
// a port freed by a job that ended is taken again, and a range past 65535 is refused up front.
#include "phub/server/core/server_core.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <future>
#include <set>
#include <thread>

#include "phub/transport/open_device.h"
#include "tests/phub/server/shard/shard_harness.h"

namespace phub::server {
namespace {

using shard_test::MakeJob;

std::shared_ptr<const JobSpec> JobWithSession(std::uint64_t session) {
  auto job = MakeJob();
  job->session = session;
  return job;
}

std::shared_ptr<transport::Device> Tcp() {
  auto device = transport::OpenDevice({transport::TransportKind::kTcp, {}, {}});
  EXPECT_TRUE(device.ok()) << device.status();
  return *device;
}

std::unique_ptr<ServerCore> MakeCore(std::uint16_t first_port, CorePorts ports) {
  CorePlace place{.address = "127.0.0.1", .port = first_port};
  auto core = ServerCore::Create(0, place, Tcp(), CoreLimits{}, ports);
  EXPECT_TRUE(core.ok()) << core.status();
  return core.ok() ? std::move(*core) : nullptr;
}

// A base port whose range [base, base + span) nobody listens on now.
std::uint16_t FreeRange(std::uint16_t span) {
  for (int attempt = 0; attempt < 50; ++attempt) {
    boost::asio::io_context context;
    boost::asio::ip::tcp::acceptor probe(
        context, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), 0));
    const std::uint16_t base = probe.local_endpoint().port();
    probe.close();
    if (base + span > 65535) continue;
    bool free = true;
    for (std::uint16_t p = base; p < base + span && free; ++p) {
      boost::system::error_code ec;
      boost::asio::ip::tcp::acceptor a(context);
      a.open(boost::asio::ip::tcp::v4(), ec);
      a.bind({boost::asio::ip::make_address("127.0.0.1"), p}, ec);
      free = !ec;
    }
    if (free) return base;
  }
  ADD_FAILURE() << "no free port range of " << span;
  return 0;
}

std::thread::id ThreadOf(ServerCore& core, std::uint64_t session) {
  std::promise<std::thread::id> id;
  core.Post(session, [&](Shard&) { id.set_value(std::this_thread::get_id()); });
  auto future = id.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  return future.get();
}

TEST(ServerCoreTest, EachJobRunsOnItsOwnThreadBehindItsOwnPort) {
  auto core = MakeCore(0, {.stride = 1, .slots = 4});
  ASSERT_NE(core, nullptr);
  const std::uint64_t a = 0x1111, b = 0x2222;
  ASSERT_TRUE(core->InstallShard(JobWithSession(a), [](ShardEvent) {}).ok());
  ASSERT_TRUE(core->InstallShard(JobWithSession(b), [](ShardEvent) {}).ok());
  EXPECT_NE(core->port(a), 0);
  EXPECT_NE(core->port(b), 0);
  EXPECT_NE(core->port(a), core->port(b));
  const std::thread::id ta = ThreadOf(*core, a), tb = ThreadOf(*core, b);
  EXPECT_NE(ta, tb);
  EXPECT_NE(ta, std::this_thread::get_id());
  // Each port takes connections (the job's shard holds them until their ATTACH).
  for (std::uint64_t s : {a, b}) {
    auto socket = testing::RawSocket::Connect(core->port(s), testing::Millis(2000));
    EXPECT_TRUE(socket.connected()) << "job " << s;
  }
  const std::uint16_t port_a = core->port(a);
  core->RemoveShard(a);
  EXPECT_EQ(core->port(a), 0);
  // Its port is closed with it: nobody listens there any more.
  auto socket = testing::RawSocket::Connect(port_a, testing::Millis(0));
  EXPECT_FALSE(socket.connected());
  EXPECT_EQ(ThreadOf(*core, b), tb);  // the other job goes on where it was
}

TEST(ServerCoreTest, WithABaseEachJobTakesTheFirstFreePortOfItsRange) {
  const std::uint16_t base = FreeRange(6);
  ASSERT_NE(base, 0);
  // Core 0 of 3, room for 2 jobs: ports base and base + 3.
  auto core = MakeCore(base, {.stride = 3, .slots = 2});
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(core->InstallShard(JobWithSession(1), [](ShardEvent) {}).ok());
  ASSERT_TRUE(core->InstallShard(JobWithSession(2), [](ShardEvent) {}).ok());
  EXPECT_EQ(core->port(1), base);
  EXPECT_EQ(core->port(2), base + 3);
  const Status third = core->InstallShard(JobWithSession(3), [](ShardEvent) {});
  EXPECT_TRUE(absl::IsResourceExhausted(third)) << third;
  EXPECT_NE(third.message().find("--max-jobs"), std::string::npos) << third;
  core->RemoveShard(1);
  ASSERT_TRUE(core->InstallShard(JobWithSession(3), [](ShardEvent) {}).ok());
  EXPECT_EQ(core->port(3), base);  // the freed port, taken again
}

TEST(ServerCoreTest, APortAnotherProgramHoldsIsSkipped) {
  const std::uint16_t base = FreeRange(4);
  ASSERT_NE(base, 0);
  boost::asio::io_context context;
  boost::asio::ip::tcp::acceptor squatter(
      context, boost::asio::ip::tcp::endpoint(boost::asio::ip::make_address("127.0.0.1"), base));
  auto core = MakeCore(base, {.stride = 2, .slots = 2});
  ASSERT_NE(core, nullptr);
  ASSERT_TRUE(core->InstallShard(JobWithSession(1), [](ShardEvent) {}).ok());
  EXPECT_EQ(core->port(1), base + 2);
  // Both ports taken now (one by the squatter): refused, naming the flag to change.
  const Status second = core->InstallShard(JobWithSession(2), [](ShardEvent) {});
  EXPECT_FALSE(second.ok());
  EXPECT_NE(second.message().find("--data-port-base"), std::string::npos) << second;
}

int NiceOf(ServerCore& core, std::uint64_t session) {
  std::promise<int> nice;
  core.Post(session, [&](Shard&) {
    nice.set_value(getpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid))));
  });
  auto future = nice.get_future();
  EXPECT_EQ(future.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  return future.get();
}

TEST(ServerCoreTest, ALanesNiceFollowsItsJobsWeight) {
  EXPECT_EQ(LaneNiceLevels(2, 2), 0);
  EXPECT_EQ(LaneNiceLevels(1, 2), 3);  // 1.25^3 = 1.95: CFS shares the CPU ~2:1
  EXPECT_EQ(LaneNiceLevels(1, 4), 6);  // 1.25^6 = 3.8
  EXPECT_EQ(LaneNiceLevels(1e-6, 1e6), 19);
  EXPECT_EQ(LaneNiceLevels(3, 2), 0);
  CorePlace place{.address = "127.0.0.1"};
  auto core = ServerCore::Create(0, place, Tcp(), CoreLimits{}, {.stride = 1, .slots = 2}, {}, 0,
                                 /*top_weight=*/2);
  ASSERT_TRUE(core.ok()) << core.status();
  ASSERT_TRUE((*core)
                  ->InstallShard(
                      JobWithSession(1), [](ShardEvent) {}, 2)
                  .ok());
  ASSERT_TRUE((*core)
                  ->InstallShard(
                      JobWithSession(2), [](ShardEvent) {}, 1)
                  .ok());
  EXPECT_EQ(NiceOf(**core, 2) - NiceOf(**core, 1), 3);
}

TEST(ServerCoreTest, ARangePastTheLastPortIsRefusedUpFront) {
  CorePlace place{.address = "127.0.0.1", .port = 65000};
  auto core = ServerCore::Create(1, place, Tcp(), CoreLimits{}, {.stride = 4, .slots = 200});
  ASSERT_FALSE(core.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(core.status())) << core.status();
  EXPECT_NE(core.status().message().find("--max-jobs"), std::string::npos) << core.status();
}

}  // namespace
}  // namespace phub::server
