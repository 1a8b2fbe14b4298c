// The racks-of-racks topology file: what it accepts, where it places each worker, and each bad
// input refused with a message that names what is wrong and where.
#include "phub/topology/topology.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

namespace phub::topology {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr const char* kTwoRacks = R"(
  # two racks of two and three
  rack { name: "r0" pbox: "10.0.0.10:7070" host: "node01" host: "node02" }
  rack { name: "r1" pbox: "pbox-1:7071"    host: "node11" host: "node12" host: "node13" }
)";

TEST(Topology, PlacesEachHostByRackThenHostOrder) {
  auto topology = Topology::Parse(kTwoRacks, "racks.txtpb");
  ASSERT_TRUE(topology.ok()) << topology.status();
  ASSERT_EQ(topology->racks().size(), 2u);
  EXPECT_EQ(topology->world_size(), 5u);
  EXPECT_EQ(topology->racks()[1].pbox.host, "pbox-1");
  EXPECT_EQ(topology->racks()[1].pbox.port, 7071);
  auto placed = topology->Locate("node12");
  ASSERT_TRUE(placed.ok()) << placed.status();
  EXPECT_EQ(placed->racks, 2u);
  EXPECT_EQ(placed->rack, 1u);
  EXPECT_EQ(placed->rank_in_rack, 1u);
  EXPECT_EQ(placed->rack_size, 3u);
  EXPECT_EQ(placed->rank, 3u);  // after rack r0's two
  EXPECT_EQ(placed->world_size, 5u);
  placed = topology->Locate("node01");
  ASSERT_TRUE(placed.ok());
  EXPECT_EQ(placed->rank, 0u);
  EXPECT_EQ(placed->rack_size, 2u);
  auto index = topology->RackIndex("r1");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(*index, 1u);
}

TEST(Topology, AnUnknownHostOrRackIsRefusedNamingTheFileAndTheFix) {
  auto topology = Topology::Parse(kTwoRacks, "racks.txtpb");
  ASSERT_TRUE(topology.ok());
  auto placed = topology->Locate("node99");
  ASSERT_FALSE(placed.ok());
  EXPECT_TRUE(absl::IsNotFound(placed.status()));
  EXPECT_THAT(std::string(placed.status().message()),
              AllOf(HasSubstr("'node99'"), HasSubstr("racks.txtpb"), HasSubstr("--hostname")));
  auto index = topology->RackIndex("r7");
  ASSERT_FALSE(index.ok());
  EXPECT_THAT(std::string(index.status().message()), AllOf(HasSubstr("'r7'"), HasSubstr("r0, r1")));
}

struct BadCase {
  const char* name;
  const char* text;
  std::vector<const char*> message;  // each must appear in the error
};

class TopologyRefuses : public ::testing::TestWithParam<BadCase> {};

TEST_P(TopologyRefuses, WithAMessageNamingWhatIsWrong) {
  auto topology = Topology::Parse(GetParam().text, "bad.txtpb");
  ASSERT_FALSE(topology.ok()) << "accepted: " << GetParam().text;
  EXPECT_TRUE(absl::IsInvalidArgument(topology.status()));
  const std::string message(topology.status().message());
  EXPECT_THAT(message, HasSubstr("bad.txtpb"));
  for (const char* part : GetParam().message) EXPECT_THAT(message, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    BadInputs, TopologyRefuses,
    ::testing::Values(
        BadCase{"Empty", "", {"no rack"}},
        BadCase{"Syntax", "rack { name: \"r0\" pbox: \"a:1\" host: \"h\" ", {"line 1"}},
        BadCase{"UnknownField", "rack { name: \"r0\" pbx: \"a:1\" host: \"h\" }", {"pbx"}},
        BadCase{"MissingPbox", "rack { name: \"r0\" host: \"h\" }", {"'r0'", "no pbox"}},
        BadCase{"PboxWithoutPort", "rack { name: \"r0\" pbox: \"a\" host: \"h\" }",
                {"'r0'", "HOST:PORT"}},
        BadCase{"PboxPortZero", "rack { name: \"r0\" pbox: \"a:0\" host: \"h\" }", {"1..65535"}},
        BadCase{"SharedPbox",
                "rack { name: \"r0\" pbox: \"a:1\" host: \"h0\" }\n"
                "rack { name: \"r1\" pbox: \"a:1\" host: \"h1\" }",
                {"'r0'", "'r1'", "a:1"}},
        BadCase{"NoHosts", "rack { name: \"r0\" pbox: \"a:1\" }", {"'r0'", "no host"}},
        BadCase{"HostInTwoRacks",
                "rack { name: \"r0\" pbox: \"a:1\" host: \"h0\" host: \"both\" }\n"
                "rack { name: \"r1\" pbox: \"b:1\" host: \"both\" }",
                {"'both'", "two racks", "'r0'", "'r1'"}},
        BadCase{"HostTwiceInARack", "rack { name: \"r0\" pbox: \"a:1\" host: \"h\" host: \"h\" }",
                {"'h'", "twice"}},
        BadCase{"EmptyHost", "rack { name: \"r0\" pbox: \"a:1\" host: \"\" }", {"host name"}},
        BadCase{"NoName", "rack { pbox: \"a:1\" host: \"h\" }", {"rack 1", "empty"}},
        BadCase{"PathName", "rack { name: \"../r\" pbox: \"a:1\" host: \"h\" }",
                {"starts with '.'"}},
        BadCase{"NameTwice",
                "rack { name: \"r\" pbox: \"a:1\" host: \"h0\" }\n"
                "rack { name: \"r\" pbox: \"b:1\" host: \"h1\" }",
                {"two racks are named 'r'"}}),
    [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

TEST(Topology, TooManyRacksAreRefused) {
  std::string text;
  for (std::uint32_t r = 0; r <= kMaxRacks; ++r) {
    text += "rack { name: \"r" + std::to_string(r) + "\" pbox: \"h:" + std::to_string(r + 1) +
            "\" host: \"w" + std::to_string(r) + "\" }\n";
  }
  auto topology = Topology::Parse(text, "big.txtpb");
  ASSERT_FALSE(topology.ok());
  EXPECT_THAT(std::string(topology.status().message()), HasSubstr("257 racks"));
}

TEST(Topology, LoadReadsTheFileAndNamesAMissingOne) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("phub-topology-" + std::to_string(getpid())))
          .string();
  std::ofstream(path) << kTwoRacks;
  auto topology = Topology::Load(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(topology.ok()) << topology.status();
  EXPECT_EQ(topology->origin(), path);
  EXPECT_EQ(topology->world_size(), 5u);
  auto missing = Topology::Load(path);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), AllOf(HasSubstr(path), HasSubstr("--topology")));
}

}  // namespace
}  // namespace phub::topology
