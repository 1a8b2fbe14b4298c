// phubd's plan of its cores over its NICs: on a two-socket PBox described by hwloc XML, the map
// --print-core-map prints, --core-map taking over, the queue each core takes on its NIC, and
// the warning when a NIC has fewer cores than its link rate needs (design.md "Sizing a PBox").
#include "phub/server/core/nic_plan.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/integration/process.h"
#include "tests/phub/placement/synthetic_machine.h"

namespace phub::server {
namespace {

class NicPlanTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // ctest runs each case as its own process, side by side: each writes its own box.
    xml_ = dir_.File("nic_plan_box.xml");
    std::ofstream(xml_) << placement::testing::SyntheticMachineXml(
        2, 4, {{"pbox0", 0, "mlx5_0"}, {"pbox1", 1, "mlx5_1"}});
    nics_.machine_xml = xml_;
    // The XML's box's interfaces, which this machine has not.
    nics_.names = {"pbox0", "pbox1"};
    cores_.count = 4;
  }
  phub::testing::TempDir dir_;
  std::string xml_;
  CoreOptions cores_;
  NicOptions nics_;
  DataPlaneOptions data_plane_;
};

TEST_F(NicPlanTest, EachSocketsCoresServeItsNicEachOnItsOwnQueue) {
  auto plan = PlanNics(cores_, nics_, data_plane_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->nic_numa_nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(placement::FormatCoreMap(plan->placement), "0@0,4@1,1@0,5@1");
  EXPECT_EQ(plan->queue_of_core, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_TRUE(plan->placement.warnings.empty());
  EXPECT_EQ(CoreMapTable(*plan),
            "core\tphysical_core\tcpu\tnuma_node\tnic\tinterface\taddress\trdma_device\tqueue\n"
            "0\t0\t0\t0\t0\tpbox0\t-\t-\t0\n"
            "1\t4\t4\t1\t1\tpbox1\t-\t-\t0\n"
            "2\t1\t1\t0\t0\tpbox0\t-\t-\t1\n"
            "3\t5\t5\t1\t1\tpbox1\t-\t-\t1\n");
}

TEST_F(NicPlanTest, TheOperatorsMapWinsAndCrossingSocketsIsSaid) {
  nics_.core_map = "0@0,1@1,4@1,5@0";
  auto plan = PlanNics(cores_, nics_, data_plane_);
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->queue_of_core, (std::vector<int>{0, 0, 1, 1}));
  ASSERT_EQ(plan->placement.warnings.size(), 2u);
  EXPECT_NE(plan->placement.warnings[0].find("server core 1"), std::string::npos);
  nics_.core_map = "0@0,1@7,4@1,5@0";
  EXPECT_FALSE(PlanNics(cores_, nics_, data_plane_).ok());
}

TEST_F(NicPlanTest, ANicWithTooFewCoresForItsRateIsSaid) {
  // 100 Gbit/s over two NICs: 6.25 GB/s each, ~3.1 cores' worth on TCP at 0.5 ns per byte.
  nics_.bytes_per_s = 100e9 / 8;
  auto tcp = PlanNics(cores_, nics_, data_plane_);
  ASSERT_TRUE(tcp.ok());
  ASSERT_EQ(tcp->placement.warnings.size(), 2u);
  EXPECT_NE(tcp->placement.warnings[0].find("NIC 0 (pbox0, 50 Gbit/s) has 2 cores; a balanced "
                                            "PBox gives it 4 on TCP"),
            std::string::npos)
      << tcp->placement.warnings[0];
  // On verbs one core feeds 100 Gbit/s: two per NIC are plenty.
  data_plane_.transport = transport::TransportKind::kVerbs;
  auto verbs = PlanNics(cores_, nics_, data_plane_);
  ASSERT_TRUE(verbs.ok());
  EXPECT_TRUE(verbs->placement.warnings.empty()) << verbs->placement.warnings[0];
}

TEST_F(NicPlanTest, ANameNoInterfaceHasIsRefusedOnThisMachine) {
  nics_.machine_xml.clear();
  nics_.names = {"nosuch7"};
  auto plan = PlanNics(cores_, nics_, data_plane_);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("NIC 'nosuch7'"), std::string::npos);
}

}  // namespace
}  // namespace phub::server
