// UniqueIdFile: how rank 0 hands the 128-byte NCCL id to the other ranks. Needs no GPU.
#include "phub/nccl/unique_id_file.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace phub::nccl {
namespace {

class UniqueIdFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "phub-nccl-id-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static UniqueIdBytes SomeId() {
    UniqueIdBytes id;
    for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 37 % 256);  // has 0s
    return id;
  }

  std::string dir_;
};

TEST_F(UniqueIdFileTest, WaitReturnsThePublishedBytes) {
  const UniqueIdFile file(dir_);
  ASSERT_TRUE(file.Publish(SomeId()).ok());
  auto id = file.Wait(1000);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, SomeId());
  EXPECT_FALSE(std::filesystem::exists(file.path() + ".tmp"));
}

TEST_F(UniqueIdFileTest, WaitSeesAnIdPublishedWhileItWaits) {
  const UniqueIdFile file(dir_);
  std::thread rank0([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(file.Publish(SomeId()).ok());
  });
  auto id = file.Wait(10000);
  rank0.join();
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, SomeId());
}

TEST_F(UniqueIdFileTest, MissingIdTimesOutNamingTheFile) {
  const UniqueIdFile file(dir_);
  auto id = file.Wait(50);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(id.status().message().find(file.path()), absl::string_view::npos) << id.status();
}

TEST_F(UniqueIdFileTest, FileOfTheWrongSizeIsRejected) {
  const UniqueIdFile file(dir_);
  std::ofstream(file.path()) << "not an id";
  auto id = file.Wait(1000);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("fresh rendezvous directory"), absl::string_view::npos)
      << id.status();
}

TEST_F(UniqueIdFileTest, RemoveDeletesTheFileAndToleratesItsAbsence) {
  const UniqueIdFile file(dir_);
  ASSERT_TRUE(file.Publish(SomeId()).ok());
  EXPECT_TRUE(file.Remove().ok());
  EXPECT_FALSE(std::filesystem::exists(file.path()));
  EXPECT_TRUE(file.Remove().ok());
}

TEST_F(UniqueIdFileTest, PublishIntoAMissingDirectoryIsRefused) {
  const UniqueIdFile file(dir_ + "/does-not-exist");
  const Status s = file.Publish(SomeId());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("writable"), absl::string_view::npos) << s;
}

}  // namespace
}  // namespace phub::nccl
