// Core placement on synthetic machines (hwloc XML): the NUMA rule, the spread over NICs, the
// override map and its refusals; and the hwloc reading itself (cores, nodes, a NIC's node).
#include "phub/placement/core_placement.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <set>

#include "phub/placement/machine.h"
#include "tests/phub/placement/synthetic_machine.h"

namespace phub::placement {
namespace {

using testing::SyntheticMachineXml;
using testing::SyntheticNic;

std::unique_ptr<Machine> Load(int packages, int cores, const std::vector<SyntheticNic>& nics) {
  auto machine = Machine::FromXmlText(SyntheticMachineXml(packages, cores, nics));
  EXPECT_TRUE(machine.ok()) << machine.status();
  return machine.ok() ? *std::move(machine) : nullptr;
}

std::vector<int> NodesOf(const Machine& machine, const std::vector<SyntheticNic>& nics) {
  std::vector<int> nodes;
  for (const auto& nic : nics) nodes.push_back(machine.NumaNodeOfDevice(nic.netdev));
  return nodes;
}

// The rule: a core serves a NIC of another node only when its own node has no NIC.
void ExpectNumaRule(const Placement& placement, const std::vector<int>& nic_nodes) {
  const std::set<int> homes(nic_nodes.begin(), nic_nodes.end());
  for (std::size_t i = 0; i < placement.cores.size(); ++i) {
    const CoreSite& site = placement.cores[i];
    const int nic_node = nic_nodes[site.nic];
    if (site.numa_node >= 0 && nic_node >= 0 && site.numa_node != nic_node) {
      EXPECT_FALSE(homes.contains(site.numa_node))
          << "server core " << i << " on node " << site.numa_node << " serves NIC " << site.nic
          << " on node " << nic_node << " though node " << site.numa_node << " has a NIC";
      EXPECT_FALSE(site.nic_is_local);
    } else {
      EXPECT_TRUE(site.nic_is_local);
    }
  }
}

std::map<std::uint32_t, int> CoresPerNic(const Placement& placement) {
  std::map<std::uint32_t, int> count;
  for (const CoreSite& site : placement.cores) ++count[site.nic];
  return count;
}

TEST(MachineTest, ReadsCoresNodesAndTheNodeOfEachNic) {
  const std::vector<SyntheticNic> nics = {{"eth0", 0, "mlx5_0"}, {"eth1", 1, "mlx5_1"},
                                          {"eth9", -1, ""}};
  auto machine = Load(2, 3, nics);
  ASSERT_NE(machine, nullptr);
  ASSERT_EQ(machine->cores().size(), 6u);
  EXPECT_EQ(machine->numa_nodes(), 2);
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(machine->cores()[i].index, i);
    EXPECT_EQ(machine->cores()[i].first_cpu, i);
    EXPECT_EQ(machine->cores()[i].numa_node, i / 3);
  }
  EXPECT_EQ(machine->NumaNodeOfDevice("eth0"), 0);
  EXPECT_EQ(machine->NumaNodeOfDevice("mlx5_0"), 0);
  EXPECT_EQ(machine->NumaNodeOfDevice("eth1"), 1);
  EXPECT_EQ(machine->NumaNodeOfDevice("mlx5_1"), 1);
  EXPECT_EQ(machine->NumaNodeOfDevice("eth9"), -1);  // below the machine: both nodes
  EXPECT_EQ(machine->NumaNodeOfDevice("lo"), -1);    // not a PCI device
}

TEST(MachineTest, RefusesWhatIsNotATopology) {
  auto machine = Machine::FromXmlText("<topology>not one</topology>");
  ASSERT_FALSE(machine.ok());
  EXPECT_NE(machine.status().message().find("hwloc cannot"), std::string::npos)
      << machine.status();
  EXPECT_FALSE(Machine::FromXmlFile("/nonexistent/box.xml").ok());
}

TEST(MachineTest, ReadsThisMachine) {
  auto machine = Machine::FromSystem();
  ASSERT_TRUE(machine.ok()) << machine.status();
  EXPECT_GE((*machine)->cores().size(), 1u);
}

TEST(PlaceCoresTest, TwoSocketsWithANicEachGetTheirOwnCores) {
  const std::vector<SyntheticNic> nics = {{"eth0", 0, ""}, {"eth1", 1, ""}};
  auto machine = Load(2, 4, nics);
  ASSERT_NE(machine, nullptr);
  const std::vector<int> nodes = NodesOf(*machine, nics);
  for (std::uint32_t cores : {1u, 2u, 3u, 4u, 7u, 8u}) {
    auto placement = PlaceCores(*machine, nodes, cores, 0);
    ASSERT_TRUE(placement.ok()) << placement.status();
    ASSERT_EQ(placement->cores.size(), cores);
    ExpectNumaRule(*placement, nodes);
    for (const CoreSite& site : placement->cores) {
      EXPECT_EQ(site.numa_node, static_cast<int>(site.nic)) << FormatCoreMap(*placement);
    }
    // Alternating, so the NICs differ by at most one core.
    for (std::uint32_t i = 0; i < cores; ++i) EXPECT_EQ(placement->cores[i].nic, i % 2);
    std::set<int> physical;
    for (const CoreSite& site : placement->cores) physical.insert(site.physical_core);
    EXPECT_EQ(physical.size(), cores) << "a physical core serves twice";
  }
  auto four = PlaceCores(*machine, nodes, 4, 0);
  EXPECT_EQ(FormatCoreMap(*four), "0@0,4@1,1@0,5@1");
  EXPECT_TRUE(four->warnings.empty());
}

TEST(PlaceCoresTest, OneNicOnATwoSocketBoxFillsItsSocketFirst) {
  const std::vector<SyntheticNic> nics = {{"eth0", 1, ""}};
  auto machine = Load(2, 4, nics);
  ASSERT_NE(machine, nullptr);
  const std::vector<int> nodes = NodesOf(*machine, nics);
  ASSERT_EQ(nodes[0], 1);
  auto four = PlaceCores(*machine, nodes, 4, 0);
  ASSERT_TRUE(four.ok());
  EXPECT_EQ(FormatCoreMap(*four), "4@0,5@0,6@0,7@0");
  EXPECT_TRUE(four->warnings.empty());
  // More cores than the NIC's socket has: the others come from the NIC-less socket, said so.
  auto six = PlaceCores(*machine, nodes, 6, 0);
  ASSERT_TRUE(six.ok());
  ExpectNumaRule(*six, nodes);
  EXPECT_EQ(FormatCoreMap(*six), "4@0,5@0,6@0,7@0,0@0,1@0");
  ASSERT_EQ(six->warnings.size(), 2u);
  EXPECT_NE(six->warnings[0].find("cross the socket interconnect"), std::string::npos);
}

TEST(PlaceCoresTest, MoreNicsThanCoresSpreadsOverTheSockets) {
  const std::vector<SyntheticNic> nics = {
      {"eth0", 0, ""}, {"eth1", 0, ""}, {"eth2", 1, ""}, {"eth3", 1, ""}};
  auto machine = Load(2, 2, nics);
  ASSERT_NE(machine, nullptr);
  const std::vector<int> nodes = NodesOf(*machine, nics);
  auto two = PlaceCores(*machine, nodes, 2, 0);
  ASSERT_TRUE(two.ok());
  ExpectNumaRule(*two, nodes);
  // One core per socket, each serving a NIC of its own socket; the two others idle, said so.
  EXPECT_EQ(FormatCoreMap(*two), "0@0,2@2");
  ASSERT_EQ(two->warnings.size(), 2u);
  EXPECT_NE(two->warnings[0].find("NIC 1 serves no core"), std::string::npos);
  EXPECT_NE(two->warnings[1].find("NIC 3 serves no core"), std::string::npos);
  // Eight cores on four physical ones: shared, still each on its NIC's socket.
  auto eight = PlaceCores(*machine, nodes, 8, 0);
  ASSERT_TRUE(eight.ok());
  ExpectNumaRule(*eight, nodes);
  EXPECT_EQ(CoresPerNic(*eight), (std::map<std::uint32_t, int>{{0, 2}, {1, 2}, {2, 2}, {3, 2}}));
  EXPECT_NE(eight->warnings.front().find("more than the 4 physical cores"), std::string::npos);
}

TEST(PlaceCoresTest, ANicOfUnknownNodeKeepsFirstCoreOrder) {
  auto machine = Load(2, 4, {});
  ASSERT_NE(machine, nullptr);
  auto three = PlaceCores(*machine, {-1}, 3, 2);
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(FormatCoreMap(*three), "2@0,3@0,4@0");
  auto wrapped = PlaceCores(*machine, {-1}, 3, 6);
  EXPECT_EQ(FormatCoreMap(*wrapped), "6@0,7@0,0@0");
  EXPECT_FALSE(PlaceCores(*machine, {}, 3, 0).ok());
  EXPECT_FALSE(PlaceCores(*machine, {-1}, 0, 0).ok());
}

TEST(PlaceCoresTest, RandomMachinesKeepTheRule) {
  std::mt19937 rng(20261126);
  for (int round = 0; round < 200; ++round) {
    const int packages = 1 + static_cast<int>(rng() % 4);
    const int per = 1 + static_cast<int>(rng() % 5);
    std::vector<SyntheticNic> nics;
    const int nic_count = 1 + static_cast<int>(rng() % 5);
    for (int k = 0; k < nic_count; ++k) {
      nics.push_back({"eth" + std::to_string(k),
                      static_cast<int>(rng() % (packages + 1)) - 1, ""});
    }
    auto machine = Load(packages, per, nics);
    ASSERT_NE(machine, nullptr);
    const std::vector<int> nodes = NodesOf(*machine, nics);
    const std::uint32_t cores = 1 + rng() % (2 * packages * per);
    auto placement = PlaceCores(*machine, nodes, cores, static_cast<int>(rng() % 8));
    ASSERT_TRUE(placement.ok());
    ASSERT_EQ(placement->cores.size(), cores);
    SCOPED_TRACE(FormatCoreMap(*placement));
    ExpectNumaRule(*placement, nodes);
    std::map<int, int> uses;
    for (const CoreSite& site : placement->cores) ++uses[site.physical_core];
    for (const auto& [core, n] : uses) {
      if (cores <= static_cast<std::uint32_t>(packages * per)) EXPECT_EQ(n, 1) << core;
    }
  }
}

TEST(CoreMapTest, TakesTheOperatorsMapAndSaysWhatCrossesSockets) {
  const std::vector<SyntheticNic> nics = {{"eth0", 0, ""}, {"eth1", 1, ""}};
  auto machine = Load(2, 4, nics);
  ASSERT_NE(machine, nullptr);
  const std::vector<int> nodes = NodesOf(*machine, nics);
  auto map = ParseCoreMap(*machine, nodes, 3, "1@0,5@1,2@1");
  ASSERT_TRUE(map.ok()) << map.status();
  EXPECT_EQ(FormatCoreMap(*map), "1@0,5@1,2@1");
  EXPECT_EQ(map->cores[1].cpu, 5);
  EXPECT_FALSE(map->cores[2].nic_is_local);
  ASSERT_EQ(map->warnings.size(), 1u);
  EXPECT_NE(map->warnings[0].find("server core 2"), std::string::npos);

  for (const auto& [text, expected] : std::vector<std::pair<std::string, std::string>>{
           {"1@0,5@1", "has 2 entries for --cores 3"},
           {"1@0,x@1,2@0", "entry 1 'x@1' is not PHYSICAL_CORE@NIC"},
           {"1@0,5,2@0", "entry 1 '5' is not"},
           {"1@0,8@1,2@0", "physical core 8 is not there"},
           {"1@0,5@2,2@0", "NIC 2 is not there"},
           {"1@0,-5@1,2@0", "is not PHYSICAL_CORE@NIC"}}) {
    auto refused = ParseCoreMap(*machine, nodes, 3, text);
    ASSERT_FALSE(refused.ok()) << text;
    EXPECT_NE(refused.status().message().find(expected), std::string::npos)
        << refused.status();
  }
}

}  // namespace
}  // namespace phub::placement
