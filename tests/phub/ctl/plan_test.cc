// phubctl plan's inputs: the tensors file (one size a line, each line checked, the line named
// when refused), the schemes' scenarios (which network, how many PS hosts, across racks), and
// the flags of a PS host's NICs and of jobs sharing it (parsed into the scenario; a bad value
// refused naming its flag).
#include "phub/ctl/plan.h"
#include "phub/ctl/plan_model_file.h"

#include "phub/ctl/plan_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace phub::ctl {
namespace {

using ::testing::HasSubstr;

// Files in a directory of this process's own (ctest runs the tests of this file side by side,
// and a shared path let one read the other's: seen once under -j2), removed when it ends.
std::string WriteFile(const std::string& text) {
  static const struct OwnDir {
    std::string path = ::testing::TempDir() + "/plan_test_XXXXXX";
    OwnDir() {
      if (mkdtemp(path.data()) == nullptr) std::abort();  // never fall back to a shared path
    }
    ~OwnDir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } dir;
  const std::string path = dir.path + "/tensors.txt";
  std::ofstream(path) << text;
  return path;
}

TEST(PlanTest, ATensorsFileIsReadLineByLineAndABadLineIsNamed) {
  auto model = ReadTensorsFile(WriteFile("# fc, then conv\n4000\n\n1024\n"), 1e12);
  ASSERT_TRUE(model.ok()) << model.status();
  ASSERT_EQ(model->tensors.size(), 2u);
  EXPECT_EQ(model->tensors[0].bytes, 4000u);
  EXPECT_EQ(model->tensors[1].bytes, 1024u);
  EXPECT_EQ(model->tensors[1].backward_seconds, 0);  // bytes only: an exchange alone
  EXPECT_EQ(model->forward_seconds, 0);
  for (const std::string& bad :
       {std::string("12\nabc\n"), std::string("12\n0\n"), std::string("12\n-5\n"),
        std::string("12\n99999999999999999\n"), std::string("12\n8 -1\n"),
        std::string("12\n8 1e30\n"), std::string("12\n8 9 10\n"), std::string("12\n8 nan\n"),
        std::string("forward 5\nforward 5\n"), std::string("12\nforward\n")}) {
    auto refused = ReadTensorsFile(WriteFile(bad), 1e12);
    EXPECT_THAT(std::string(refused.status().message()), HasSubstr("line 2")) << bad;
  }
  EXPECT_THAT(std::string(ReadTensorsFile(WriteFile("# nothing\nforward 9\n"), 1e12)
                              .status().message()),
              HasSubstr("no tensors"));
  EXPECT_THAT(std::string(ReadTensorsFile("/nonexistent/tensors", 1e12).status().message()),
              HasSubstr("cannot be read"));
}

TEST(PlanTest, AModelsFlopsBecomeSecondsAtTheGivenRate) {
  const std::string path = WriteFile("forward 3e12\n4000 2e12\n1024\t4e12\n");
  auto model = ReadTensorsFile(path, 2e12);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_DOUBLE_EQ(model->forward_seconds, 1.5);
  ASSERT_EQ(model->tensors.size(), 2u);
  EXPECT_DOUBLE_EQ(model->tensors[0].backward_seconds, 1.0);
  EXPECT_DOUBLE_EQ(model->tensors[1].backward_seconds, 2.0);
  // --gpu-tflops overrides the calibrated rate in every scheme's scenario.
  PlanOptions o;
  o.tensors_file = path;
  o.gpu_tflops = 4;
  auto s = ScenarioFor("ring", o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_DOUBLE_EQ(s->forward_seconds, 0.75);
  EXPECT_DOUBLE_EQ(s->tensors[1].backward_seconds, 1.0);
}

// The sizing rule worked by hand: NICs for the rack's rate, boxes for the NICs, cores for each
// box's bytes at the calibrated CPU per byte with the headroom.
TEST(PlanTest, PboxesNicsAndCoresFollowTheRacksRate) {
  PlanOptions o;
  o.workers = 64;
  o.gbps = 100;  // 6,400 Gbit/s of workers
  o.nic_gbps = 400;
  o.max_nics = 8;
  o.verbs = true;
  sim::Calibration c;
  PboxSizing z = SizePboxes(o, c);
  EXPECT_DOUBLE_EQ(z.rack_gbps, 6400);
  EXPECT_EQ(z.pboxes_per_rack, 2u);  // 16 NICs of 400, at most 8 a box
  EXPECT_EQ(z.nics, 8u);
  const double per_box = 6400e9 / 8 / 2;
  EXPECT_EQ(z.cores, static_cast<std::uint32_t>(
                         std::ceil(per_box * c.verbs_core_seconds_per_byte / kBusiestCore)));
  o.verbs = false;  // TCP: the copies' CPU
  EXPECT_EQ(SizePboxes(o, c).cores, static_cast<std::uint32_t>(std::ceil(
                                        per_box * c.tcp_core_seconds_per_byte / kBusiestCore)));
  // Across racks a rack's PBoxes take its uplink too.
  o.workers = 128;
  o.racks = 2;
  o.uplink_gbps = 3200;
  z = SizePboxes(o, c);
  EXPECT_DOUBLE_EQ(z.rack_gbps, 9600);
  EXPECT_EQ(z.pboxes_per_rack, 3u);  // 24 NICs
  EXPECT_EQ(z.nics, 8u);
  sim::Scenario sized = SizedScenario(*ScenarioFor("ring", o), z);
  EXPECT_EQ(sized.scheme, sim::Scheme::kPsRacks);
  // A rack's 3 boxes' cores as one host's, but no more than the chunks (100 MiB: 100), each
  // chunk being on one core.
  ASSERT_GT(z.cores * 3, 100u);
  EXPECT_EQ(sized.ps_cores, 100u);
  o.mib = 1000;
  EXPECT_EQ(SizedScenario(*ScenarioFor("ring", o), z).ps_cores, z.cores * 3);
  // What is sized is one job on the sized boxes, not the user's own PS host.
  o.racks = 1;
  o.workers = 4;
  o.ps_nics = 2;
  o.ps_nic_gbps = 0.5;
  o.jobs = "2,2";
  o.pace_gbps = 1;
  sized = SizedScenario(*ScenarioFor("ps-pbox", o), SizePboxes(o, c));
  EXPECT_EQ(sized.ps_nics, 1u);
  EXPECT_EQ(sized.ps_nic_gbps, 0);
  EXPECT_TRUE(sized.jobs.empty());
  EXPECT_EQ(sized.ps_pace_gbps, 0);
  EXPECT_TRUE(sim::Check(sized).ok()) << sim::Check(sized);
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

// `phubctl plan ARGS` parsed as phubctl parses it; the parse error's message, or "".
std::string Parse(std::vector<std::string> args, PlanOptions& o) {
  CLI::App app;
  AddPlanFlags(app, o);
  args.insert(args.begin(), "plan");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

TEST(PlanTest, NicAndJobFlagsAreParsedIntoThePsScenarios) {
  PlanOptions o;
  ASSERT_EQ(Parse({"--workers", "4", "--mib", "32", "--ps-nics", "2", "--ps-nic-gbps", "1.5",
                   "--jobs", "3:2,1", "--pace-gbps", "0.9", "--push-bytes-ratio", "0.5",
                   "--streams", "16"},
                  o),
            "");
  auto s = ScenarioFor("ps-cloud", o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->ps_nics, 2u);
  EXPECT_EQ(s->ps_nic_gbps, 1.5);
  ASSERT_EQ(s->jobs.size(), 2u);
  EXPECT_EQ(s->jobs[0].workers, 3u);
  EXPECT_EQ(s->jobs[0].weight, 2.0);
  EXPECT_EQ(s->jobs[1].workers, 1u);
  EXPECT_EQ(s->jobs[1].weight, 1.0);  // not given: 1
  EXPECT_EQ(s->ps_pace_gbps, 0.9);
  EXPECT_EQ(s->push_bytes_ratio, 0.5);
  EXPECT_TRUE(s->streaming);
  ASSERT_EQ(s->tensors.size(), 16u);
  std::uint64_t bytes = 0;
  for (const sim::Tensor& t : s->tensors) bytes += t.bytes;
  EXPECT_EQ(bytes, 32u << 20);
  // The ring has no PS host: none of them applies.
  auto ring = ScenarioFor("ring", o);
  ASSERT_TRUE(ring.ok()) << ring.status();
  EXPECT_EQ(ring->ps_nics, 1u);
  EXPECT_TRUE(ring->jobs.empty());
  EXPECT_FALSE(ring->streaming);
}

TEST(PlanTest, ABadNicOrJobFlagIsRefusedNamingIt) {
  for (const auto& [args, flag] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--ps-nics", "0"}, "--ps-nics"},
           {{"--ps-nics", "65"}, "--ps-nics"},
           {{"--ps-nic-gbps", "-1"}, "--ps-nic-gbps"},
           {{"--pace-gbps", "-0.5"}, "--pace-gbps"},
           {{"--push-bytes-ratio", "0"}, "--push-bytes-ratio"},
           {{"--streams", "-2"}, "--streams"}}) {
    PlanOptions o;
    EXPECT_THAT(Parse(args, o), HasSubstr(flag)) << args[0] << " " << args[1];
  }
  for (const auto& [jobs, why] : std::vector<std::pair<std::string, std::string>>{
           {"2:x,2", "'2:x'"}, {"2,2:0", "'2:0'"}, {"0,4", "'0'"}, {"2:1:1,2", "'2:1:1'"},
           {"2,1", "add up to 3, not --workers 4"}}) {
    PlanOptions o;
    o.jobs = jobs;
    const std::string message(ScenarioFor("ps-pbox", o).status().message());
    EXPECT_THAT(message, HasSubstr("--jobs")) << jobs;
    EXPECT_THAT(message, HasSubstr(why)) << jobs;
  }
  PlanOptions o;
  o.streams = 4;
  o.tensors_file = WriteFile("1024\n");
  EXPECT_THAT(std::string(ScenarioFor("ps-pbox", o).status().message()), HasSubstr("--streams"));
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
