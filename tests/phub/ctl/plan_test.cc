// phubctl plan's inputs: the tensors file (one size a line, each line checked, the line named
// when refused), the schemes' scenarios (which network, how many PS hosts, across racks), and
// the flags of a PS host's NICs and of jobs sharing it (parsed into the scenario; a bad value
// refused naming its flag).
#include "phub/ctl/plan.h"

#include "phub/ctl/plan_flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

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
  o.racks = 2;
  o.uplink_gbps = 2;
  multi = ScenarioFor("ps-multi", o);  // across racks: every rack's PBox
  ASSERT_TRUE(multi.ok()) << multi.status();
  EXPECT_EQ(multi->ps_hosts, 2u);
  EXPECT_EQ(multi->network, sim::Network::kPbox);
  auto racks = ScenarioFor("ps-racks", o);
  ASSERT_TRUE(racks.ok());
  EXPECT_EQ(racks->scheme, sim::Scheme::kPsRacks);
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

}  // namespace
}  // namespace phub::ctl
