// FileStore: the rendezvous through a shared directory (what FileRendezvous and UniqueIdFile
// did, behind the Store interface). Atomic publishes, waits for late publishers, bounded reads.
#include "phub/rendezvous/file_store.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "phub/rendezvous/frame.h"

namespace phub::rendezvous {
namespace {

using ::testing::HasSubstr;

class FileStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (std::filesystem::temp_directory_path() / "phub-rdv-XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::string Binary() {
    std::string id(128, '\0');
    for (std::size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(i * 37 % 256);  // has 0s
    return id;
  }

  std::string dir_;
};

TEST_F(FileStoreTest, LookupReturnsThePublishedBytes) {
  FileStore store(dir_);
  ASSERT_TRUE(store.Publish("nccl.id", Binary()).ok());
  auto value = store.Lookup("nccl.id", 1000);
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, Binary());
  EXPECT_FALSE(std::filesystem::exists(store.PathOf("nccl.id") + ".tmp"));
  // The ring's files look as FileRendezvous wrote them.
  ASSERT_TRUE(store.Publish("rank0.addr", "127.0.0.1 4242\n").ok());
  std::ifstream in(dir_ + "/rank0.addr");
  std::string host;
  int port = 0;
  ASSERT_TRUE(in >> host >> port);
  EXPECT_EQ(host, "127.0.0.1");
  EXPECT_EQ(port, 4242);
}

TEST_F(FileStoreTest, LookupSeesAValuePublishedWhileItWaits) {
  FileStore store(dir_);
  std::thread rank0([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_TRUE(FileStore(dir_).Publish("nccl.id", Binary()).ok());
  });
  auto value = store.Lookup("nccl.id", 10000);
  rank0.join();
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(*value, Binary());
}

TEST_F(FileStoreTest, AMissingKeyTimesOutNamingTheKeyAndTheFile) {
  FileStore store(dir_);
  auto value = store.Lookup("rank1.addr", 50);
  EXPECT_EQ(value.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(value.status().message()), HasSubstr(store.PathOf("rank1.addr")));
  EXPECT_THAT(std::string(value.status().message()), HasSubstr("'rank1.addr'"));
}

TEST_F(FileStoreTest, AFileOverTheValueLimitIsRefusedWithoutReadingItAll) {
  FileStore store(dir_);
  std::ofstream(store.PathOf("big")) << std::string(4 * kMaxValueBytes, 'x');
  auto value = store.Lookup("big", 1000);
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(value.status().message()), HasSubstr("fresh rendezvous directory"));
}

TEST_F(FileStoreTest, RemoveDeletesTheFileAndToleratesItsAbsence) {
  FileStore store(dir_);
  ASSERT_TRUE(store.Publish("nccl.id", Binary()).ok());
  EXPECT_TRUE(store.Remove("nccl.id").ok());
  EXPECT_FALSE(std::filesystem::exists(store.PathOf("nccl.id")));
  EXPECT_TRUE(store.Remove("nccl.id").ok());
  EXPECT_EQ(store.Lookup("nccl.id", 20).status().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST_F(FileStoreTest, PublishIntoAMissingDirectoryIsRefused) {
  FileStore store(dir_ + "/does-not-exist");
  const Status s = store.Publish("nccl.id", Binary());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("writable"));
}

TEST_F(FileStoreTest, KeysThatWouldLeaveTheDirectoryAreRefused) {
  FileStore store(dir_ + "/sub");
  EXPECT_EQ(store.Publish("../escape", "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Lookup("..", 10).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/escape"));
}

}  // namespace
}  // namespace phub::rendezvous
