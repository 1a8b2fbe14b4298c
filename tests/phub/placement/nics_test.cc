// Resolving --nics: interfaces and addresses (this machine's loopback), RDMA devices found on
// an interface through a fake sysfs tree, and the refusals.
#include "phub/placement/nics.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

namespace phub::placement {
namespace {

namespace fs = std::filesystem;

TEST(NicsTest, AnInterfaceGivesItsAddressAndAnAddressItsInterface) {
  auto by_name = ResolveNics({"lo"}, {}, "0.0.0.0", "/nonexistent");
  ASSERT_TRUE(by_name.ok()) << by_name.status();
  ASSERT_EQ(by_name->size(), 1u);
  EXPECT_EQ((*by_name)[0].interface, "lo");
  EXPECT_EQ((*by_name)[0].address, "127.0.0.1");
  // 127.0.0.2 is no interface's own address but lies in lo's prefix.
  auto by_address = ResolveNics({"127.0.0.1", "127.0.0.2"}, {"rxe7"}, "0.0.0.0");
  ASSERT_TRUE(by_address.ok()) << by_address.status();
  ASSERT_EQ(by_address->size(), 2u);
  EXPECT_EQ((*by_address)[1].interface, "lo");
  EXPECT_EQ((*by_address)[1].address, "127.0.0.2");
  EXPECT_EQ((*by_address)[1].rdma_device, "rxe7");  // one device named: every NIC's
  auto v6 = ResolveNics({"::1"}, {}, "0.0.0.0");
  ASSERT_TRUE(v6.ok());
  EXPECT_EQ((*v6)[0].address, "::1");
}

TEST(NicsTest, WithoutNicsOneNicPerRdmaDeviceOnTheListenAddress) {
  auto none = ResolveNics({}, {}, "10.0.0.5");
  ASSERT_TRUE(none.ok());
  ASSERT_EQ(none->size(), 1u);
  EXPECT_EQ((*none)[0].address, "10.0.0.5");
  auto two = ResolveNics({}, {"mlx5_0", "mlx5_1"}, "0.0.0.0");
  ASSERT_TRUE(two.ok());
  ASSERT_EQ(two->size(), 2u);
  EXPECT_EQ((*two)[1].rdma_device, "mlx5_1");
  EXPECT_EQ((*two)[1].address, "0.0.0.0");
}

TEST(NicsTest, RefusesAnUnknownInterfaceAndMismatchedDevices) {
  auto unknown = ResolveNics({"nosuch9"}, {}, "0.0.0.0");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(unknown.status().message().find("lo 127.0.0.1"), std::string::npos)
      << unknown.status();
  auto mismatched = ResolveNics({"lo", "127.0.0.2", "127.0.0.3"}, {"a", "b"}, "0.0.0.0");
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.status().message().find("one device per NIC"), std::string::npos);
}

TEST(NicsTest, FindsTheRdmaDeviceWhoseGidsSitOnAnInterface) {
  // Its own tree: the Release and sanitizer runs of this case may overlap on one machine.
  const fs::path root =
      fs::path(::testing::TempDir()) / ("fake-sysfs-" + std::to_string(::getpid()));
  fs::remove_all(root);
  auto gid = [&](const std::string& dev, int port, int index, const std::string& netdev) {
    const fs::path dir = root / "class" / "infiniband" / dev / "ports" / std::to_string(port) /
                         "gid_attrs" / "ndevs";
    fs::create_directories(dir);
    std::ofstream(dir / std::to_string(index)) << netdev << "\n";
  };
  gid("rxe0", 1, 0, "dummy0");
  gid("rxe0", 1, 1, "dummy0");
  gid("rxe1", 1, 0, "dummy1");
  gid("mlx5_0", 1, 0, "");  // InfiniBand: no netdev
  EXPECT_EQ(RdmaDeviceOnInterface("dummy1", root.string()), "rxe1");
  EXPECT_EQ(RdmaDeviceOnInterface("dummy0", root.string()), "rxe0");
  EXPECT_EQ(RdmaDeviceOnInterface("eth0", root.string()), "");
  EXPECT_EQ(RdmaDeviceOnInterface("dummy0", "/nonexistent"), "");
  gid("rxelo", 1, 0, "lo");
  auto nics = ResolveNics({"lo"}, {}, "0.0.0.0", root.string());
  ASSERT_TRUE(nics.ok());
  EXPECT_EQ((*nics)[0].rdma_device, "rxelo");
  fs::remove_all(root);
}

TEST(NicsTest, SplitsCommaLists) {
  EXPECT_EQ(SplitList("eth0,eth1"), (std::vector<std::string>{"eth0", "eth1"}));
  EXPECT_EQ(SplitList(""), std::vector<std::string>{});
  EXPECT_EQ(SplitList("a,,b"), (std::vector<std::string>{"a", "b"}));
}

}  // namespace
}  // namespace phub::placement
