#include "phub/common/token_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace phub {
namespace {

// A file in a fresh directory, removed with it.
class TokenFileTest : public ::testing::Test {
 protected:
  TokenFileTest() {
    std::string templ =
        (std::filesystem::temp_directory_path() / "phub-token-test-XXXXXX").string();
    dir_ = mkdtemp(templ.data());
  }
  ~TokenFileTest() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& contents) {
    const std::string path = (dir_ / "token").string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }

  std::filesystem::path dir_;
};

TEST_F(TokenFileTest, TrimsTheLineEnd) {
  EXPECT_EQ(*ReadTokenFile(Write("s3cret\n")), "s3cret");
  EXPECT_EQ(*ReadTokenFile(Write("s3cret\r\n")), "s3cret");
  EXPECT_EQ(*ReadTokenFile(Write("s3cret")), "s3cret");
}

// The case phubd and phub-worker used to read differently (the worker kept the space and tab).
TEST_F(TokenFileTest, TrimsTrailingSpacesAndTabs) {
  EXPECT_EQ(*ReadTokenFile(Write("s3cret \t\n")), "s3cret");
  EXPECT_EQ(*ReadTokenFile(Write("s3cret\t")), "s3cret");
  EXPECT_EQ(*ReadTokenFile(Write("s3cret \n\n \r\n\v\f")), "s3cret");
}

TEST_F(TokenFileTest, KeepsLeadingAndInnerBytes) {
  EXPECT_EQ(*ReadTokenFile(Write(" a b\tc\n")), " a b\tc");
  EXPECT_EQ(*ReadTokenFile(Write(std::string("a\0b\n", 4))), std::string("a\0b", 3));
}

TEST_F(TokenFileTest, RefusesAnEmptyFileNamingIt) {
  for (const std::string& contents : {std::string(), std::string(" \t\r\n")}) {
    const std::string path = Write(contents);
    auto token = ReadTokenFile(path);
    EXPECT_TRUE(absl::IsInvalidArgument(token.status())) << token.status();
    EXPECT_NE(std::string(token.status().message()).find(path), std::string::npos);
    EXPECT_NE(std::string(token.status().message()).find("no token"), std::string::npos);
  }
}

TEST_F(TokenFileTest, AMissingFileIsNotFoundAndSaysHowToMakeOne) {
  const std::string path = (dir_ / "absent").string();
  auto token = ReadTokenFile(path);
  EXPECT_TRUE(absl::IsNotFound(token.status())) << token.status();
  EXPECT_NE(std::string(token.status().message()).find(path), std::string::npos);
  EXPECT_NE(std::string(token.status().message()).find("create one"), std::string::npos);
}

TEST_F(TokenFileTest, AnOversizedFileIsNotAToken) {
  EXPECT_EQ(ReadTokenFile(Write(std::string(kMaxTokenFileBytes, 'x'))).value().size(),
            kMaxTokenFileBytes);
  const std::string path = Write(std::string(kMaxTokenFileBytes + 1, 'x'));
  auto token = ReadTokenFile(path);
  EXPECT_TRUE(absl::IsFailedPrecondition(token.status())) << token.status();
  EXPECT_NE(std::string(token.status().message()).find(path), std::string::npos);
}

TEST_F(TokenFileTest, ADirectoryIsNotAToken) { EXPECT_FALSE(ReadTokenFile(dir_.string()).ok()); }

}  // namespace
}  // namespace phub
