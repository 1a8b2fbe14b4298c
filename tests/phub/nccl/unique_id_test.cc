// How rank 0 hands the 128-byte NCCL id to the other ranks, through either rendezvous store.
// Needs no GPU. (The stores themselves: tests/phub/rendezvous/.)
#include "phub/nccl/unique_id.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "phub/rendezvous/file_store.h"
#include "tests/support/free_port.h"

namespace phub::nccl {
namespace {

class UniqueIdTest : public ::testing::Test {
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

TEST_F(UniqueIdTest, TheDirectoryHoldsTheIdAsTheFileNcclId) {
  rendezvous::FileStore store(dir_);
  ASSERT_TRUE(PublishUniqueId(store, SomeId()).ok());
  EXPECT_EQ(std::filesystem::file_size(dir_ + "/nccl.id"), kUniqueIdBytes);
  auto id = LookupUniqueId(store, 1000);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(*id, SomeId());
}

TEST_F(UniqueIdTest, AnIdOfTheWrongSizeIsRejected) {
  rendezvous::FileStore store(dir_);
  std::ofstream(store.PathOf(kUniqueIdKey)) << "not an id";
  auto id = LookupUniqueId(store, 1000);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(id.status().message().find("fresh rendezvous directory"), absl::string_view::npos)
      << id.status();
}

TEST_F(UniqueIdTest, AMissingIdTimesOutNamingTheKey) {
  rendezvous::FileStore store(dir_);
  auto id = LookupUniqueId(store, 50);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(id.status().message().find(store.PathOf(kUniqueIdKey)), absl::string_view::npos)
      << id.status();
}

TEST_F(UniqueIdTest, TheIdTravelsOverTheTcpRendezvous) {
  const std::string address = absl::StrCat("tcp://127.0.0.1:", testing::FreeLoopbackPort());
  StatusOr<UniqueIdBytes> seen;
  std::thread rank1([&] {
    seen = [&]() -> StatusOr<UniqueIdBytes> {
      PHUB_ASSIGN_OR_RETURN(auto store, rendezvous::OpenStore({address, 1, 2, 10000}));
      PHUB_ASSIGN_OR_RETURN(UniqueIdBytes id, LookupUniqueId(*store, 10000));
      PHUB_RETURN_IF_ERROR(store->Finish());
      return id;
    }();
  });
  auto store = rendezvous::OpenStore({address, 0, 2, 10000});
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE(PublishUniqueId(**store, SomeId()).ok());
  rank1.join();
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(*seen, SomeId());
  EXPECT_TRUE((*store)->Remove(kUniqueIdKey).ok());
  EXPECT_TRUE((*store)->Finish().ok());
}

}  // namespace
}  // namespace phub::nccl
