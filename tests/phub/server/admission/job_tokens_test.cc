#include "phub/server/admission/job_tokens.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "tests/integration/process.h"

namespace phub::server {
namespace {

TEST(JobNameTest, EmptyIsTheDefaultJob) { EXPECT_EQ(*JobName(""), "default"); }

TEST(JobNameTest, AcceptsLauncherIds) {
  for (const std::string& name :
       std::vector<std::string>{"1234567", "resnet50-run.3", "a_b", std::string(64, 'x')}) {
    auto job = JobName(name);
    ASSERT_TRUE(job.ok()) << name << ": " << job.status();
    EXPECT_EQ(*job, name);
  }
}

TEST(JobNameTest, RefusesNamesThatCouldLeaveTheTokenDirectory) {
  for (const char* name : {"..", "../etc/passwd", "a/b", ".hidden", "a b", "a\nb", "tab\t",
                           "\xc3\xa9t\xc3\xa9"}) {
    auto job = JobName(name);
    EXPECT_TRUE(absl::IsInvalidArgument(job.status())) << "'" << name << "' was accepted";
    EXPECT_NE(std::string(job.status().message()).find("[A-Za-z0-9._-]"), std::string::npos)
        << job.status();
  }
  auto long_name = JobName(std::string(65, 'x'));
  EXPECT_TRUE(absl::IsInvalidArgument(long_name.status()));
  EXPECT_NE(std::string(long_name.status().message()).find("at most 64"), std::string::npos);
}

TEST(ExpectedTokenTest, WithoutATokenDirectoryEveryJobPresentsTheTokenFile) {
  SharingOptions options;
  options.job_token = "shared";
  EXPECT_EQ(*ExpectedToken(options, "a"), "shared");
  EXPECT_EQ(*ExpectedToken(options, "default"), "shared");
}

TEST(ExpectedTokenTest, ATokenDirectoryGivesEachJobItsOwn) {
  testing::TempDir dir;
  std::ofstream(dir.File("alpha")) << "alpha-secret\n";
  std::ofstream(dir.File("beta")) << "beta-secret";
  SharingOptions options;
  options.job_token = "ignored";
  options.job_tokens_dir = dir.path();
  EXPECT_EQ(*ExpectedToken(options, "alpha"), "alpha-secret");  // trailing newline trimmed
  EXPECT_EQ(*ExpectedToken(options, "beta"), "beta-secret");
  auto missing = ExpectedToken(options, "gamma");
  EXPECT_TRUE(absl::IsNotFound(missing.status()));
  EXPECT_NE(std::string(missing.status().message()).find("gamma"), std::string::npos);
  // Added while phubd runs: read at the job's first Hello.
  std::ofstream(dir.File("gamma")) << "g";
  EXPECT_EQ(*ExpectedToken(options, "gamma"), "g");
}

TEST(ExpectedTokenTest, AnOversizedFileIsNotAToken) {
  testing::TempDir dir;
  std::ofstream(dir.File("big")) << std::string(100000, 'x');
  SharingOptions options;
  options.job_tokens_dir = dir.path();
  EXPECT_TRUE(absl::IsFailedPrecondition(ExpectedToken(options, "big").status()));
}

}  // namespace
}  // namespace phub::server
