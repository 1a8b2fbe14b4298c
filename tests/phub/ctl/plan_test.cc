// phubctl plan's inputs: the tensors file (one size a line, each line checked, the line named
// when refused) and the schemes' scenarios (which network, how many PS hosts, across racks).
#include "phub/ctl/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

namespace phub::ctl {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& text) {
  const std::string path = ::testing::TempDir() + "/plan_test_tensors.txt";
  std::ofstream(path) << text;
  return path;
}

TEST(PlanTest, ATensorsFileIsReadLineByLineAndABadLineIsNamed) {
  auto tensors = ReadTensorsFile(WriteFile("# fc, then conv\n4000\n\n1024\n"));
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 2u);
  EXPECT_EQ((*tensors)[0].bytes, 4000u);
  EXPECT_EQ((*tensors)[1].bytes, 1024u);
  for (const std::string& bad : {std::string("12\nabc\n"), std::string("12\n0\n"),
                                 std::string("12\n-5\n"), std::string("12\n99999999999999999\n")}) {
    auto refused = ReadTensorsFile(WriteFile(bad));
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("line 2")) << bad;
  }
  EXPECT_THAT(std::string(ReadTensorsFile(WriteFile("# nothing\n")).status().message()),
              HasSubstr("no tensors"));
  EXPECT_THAT(std::string(ReadTensorsFile("/nonexistent/tensors").status().message()),
              HasSubstr("cannot be read"));
}

TEST(PlanTest, EachSchemeIsItsScenario) {
  PlanOptions o;
  o.workers = 8;
  auto cloud = ScenarioFor("ps-cloud", o);
  ASSERT_TRUE(cloud.ok());
  EXPECT_EQ(cloud->network, sim::Network::kCloud);
  auto multi = ScenarioFor("ps-multi", o);
  ASSERT_TRUE(multi.ok());
  EXPECT_EQ(multi->ps_hosts, o.ps_hosts);
  EXPECT_EQ(multi->network, sim::Network::kCloud);
  auto tree = ScenarioFor("tree", o);
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->scheme, sim::Scheme::kTree);
  o.racks = 2;
  o.uplink_gbps = 2;
  multi = ScenarioFor("ps-multi", o);  // across racks: every rack's PBox
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_EQ(multi->ps_hosts, 2u);
  EXPECT_EQ(multi->network, sim::Network::kPbox);
  auto racks = ScenarioFor("ps-racks", o);
  ASSERT_TRUE(racks.ok());
  EXPECT_EQ(racks->scheme, sim::Scheme::kPsRacks);
  EXPECT_THAT(std::string(ScenarioFor("tree", o).status().message()), HasSubstr("across racks"));
  EXPECT_THAT(std::string(ScenarioFor("allgather", o).status().message()),
              HasSubstr("give ps-pbox"));
  o.racks = 3;  // 8 workers in 3 racks
  EXPECT_THAT(std::string(ScenarioFor("ps-racks", o).status().message()), HasSubstr("racks"));
}

TEST(PlanTest, BucketMibIsDdpsBucketCapAndABadOneIsRefused) {
  PlanOptions o;
  auto ring = ScenarioFor("ring", o);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->bucket_bytes, 25u << 20);  // DDP's bucket_cap_mb default
  o.bucket_mib = 0.5;
  auto tree = ScenarioFor("tree", o);
  ASSERT_TRUE(tree.ok()) << tree.status();
  EXPECT_EQ(tree->bucket_bytes, 512u << 10);
  o.bucket_mib = 0;  // one allreduce after backward
  EXPECT_EQ(ScenarioFor("ring", o)->bucket_bytes, 0u);
  for (double bad : {-1.0, std::nan(""), 1e9}) {
    o.bucket_mib = bad;
    EXPECT_THAT(std::string(ScenarioFor("tree", o).status().message()), HasSubstr("--bucket-mib"))
        << bad;
  }
}

}  // namespace
}  // namespace phub::ctl
