// --rendezvous: a directory, or tcp://HOST:PORT[/JOB]; typos are refused, not taken for paths.
#include "phub/rendezvous/address.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace phub::rendezvous {
namespace {

using ::testing::HasSubstr;

TEST(RendezvousAddress, APathIsADirectory) {
  auto a = ParseAddress("/shared/job-17/rdv");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(std::get<DirectoryAddress>(*a).directory, "/shared/job-17/rdv");
  EXPECT_TRUE(std::holds_alternative<DirectoryAddress>(*ParseAddress("relative/dir")));
}

TEST(RendezvousAddress, TcpHostPortAndJob) {
  auto a = ParseAddress("tcp://node017:29500");
  ASSERT_TRUE(a.ok()) << a.status();
  const auto& tcp = std::get<TcpAddress>(*a);
  EXPECT_EQ(tcp.host, "node017");
  EXPECT_EQ(tcp.port, 29500);
  EXPECT_EQ(tcp.job, "");
  EXPECT_EQ(tcp.ToString(), "tcp://node017:29500");

  auto b = ParseAddress("tcp://10.1.2.3:1/slurm-991");
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(std::get<TcpAddress>(*b).job, "slurm-991");
  EXPECT_EQ(std::get<TcpAddress>(*b).ToString(), "tcp://10.1.2.3:1/slurm-991");

  auto c = ParseAddress("tcp://[fe80::1]:65535");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(std::get<TcpAddress>(*c).host, "fe80::1");
  EXPECT_EQ(std::get<TcpAddress>(*c).ToString(), "tcp://[fe80::1]:65535");
}

TEST(RendezvousAddress, BadFormsAreRefusedShowingTheAcceptedOnes) {
  for (const std::string bad :
       {"", "tpc://host:1", "tcp://host", "tcp://host:0", "tcp://host:65536", "tcp://host:12x",
        "tcp://:80", "tcp://fe80::1:80", "tcp://[fe80::1]80", "tcp://host:80/", "tcp://h:80/a b",
        "tcp://host:-1"}) {
    auto a = ParseAddress(bad);
    ASSERT_FALSE(a.ok()) << "'" << bad << "' was accepted";
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("tcp://HOST:PORT")) << bad;
  }
}

}  // namespace
}  // namespace phub::rendezvous
