// Rank and world from a launcher's environment: a variable that is set but wrong is an error
// naming it, never a silent rank 0.
#include "worker/train/launch_env.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "tests/worker/status_testing.h"

namespace phub::worker {
namespace {

using ::testing::HasSubstr;
using testing::StatusIs;

class LaunchEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                          "SLURM_PROCID", "SLURM_NTASKS"}) {
      unsetenv(v);
    }
  }
};

TEST_F(LaunchEnvTest, NoLauncherMeansNoRank) {
  PHUB_ASSERT_OK_AND_ASSIGN(auto r, RankFromEnvironment());
  EXPECT_FALSE(r.has_value());
}

TEST_F(LaunchEnvTest, SlurmsVariablesGiveRankAndWorld) {
  setenv("SLURM_PROCID", "3", 1);
  setenv("SLURM_NTASKS", "4", 1);
  PHUB_ASSERT_OK_AND_ASSIGN(auto r, RankFromEnvironment());
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->rank, 3u);
  EXPECT_EQ(r->world, 4u);
  EXPECT_EQ(r->source, "SLURM_PROCID/SLURM_NTASKS");
}

TEST_F(LaunchEnvTest, ANonNumberIsRefusedNamingTheVariable) {
  setenv("PMI_RANK", "one", 1);
  setenv("PMI_SIZE", "2", 1);
  EXPECT_THAT(RankFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("environment variable PMI_RANK='one' is not a non-negative")));
}

TEST_F(LaunchEnvTest, ARankNotBelowTheSizeIsRefused) {
  setenv("OMPI_COMM_WORLD_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
  EXPECT_THAT(RankFromEnvironment(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("OMPI_COMM_WORLD_RANK=2 is not below OMPI_COMM_WORLD_SIZE=2")));
}

}  // namespace
}  // namespace phub::worker
