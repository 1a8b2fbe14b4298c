#include "phub/server/job/initial_weights.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "phub/keys/key_table.h"

namespace phub::server {
namespace {

::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

// Two tensors of 5 and 7 elements: 12 float32 values, 48 bytes.
keys::KeyTable TwelveElementTable() {
  StatusOr<keys::KeyTable> table = keys::KeyTable::Build({{"a", 5}, {"b", 7}}, 16, 2);
  EXPECT_TRUE(table.ok()) << table.status();
  return *std::move(table);
}

// A file under the test's temporary directory, removed when the test ends.
class InitialWeightsTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove(path_); }

  void WriteBytes(const void* data, std::size_t size) {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
    ASSERT_TRUE(out.good()) << "cannot write " << path_;
  }

  const std::string path_ = ::testing::TempDir() + "phub_initial_weights_" +
                            ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                            ".f32";
};

TEST_F(InitialWeightsTest, LoadsExactValuesInFileOrder) {
  // Values whose bits a text round trip or a conversion would disturb.
  const std::vector<float> values = {0.0f,
                                     -0.0f,
                                     1.0f,
                                     -3.25f,
                                     std::numeric_limits<float>::denorm_min(),
                                     std::numeric_limits<float>::max(),
                                     std::numeric_limits<float>::lowest(),
                                     std::numeric_limits<float>::infinity(),
                                     1e-30f,
                                     123456.789f,
                                     0.1f,
                                     -7.0f};
  ASSERT_EQ(values.size(), 12u);
  ASSERT_NO_FATAL_FAILURE(WriteBytes(values.data(), values.size() * sizeof(float)));

  StatusOr<std::vector<float>> loaded = LoadInitialWeights(path_, TwelveElementTable());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ASSERT_EQ(loaded->size(), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    std::uint32_t want;
    std::uint32_t got;
    std::memcpy(&want, &values[i], 4);
    std::memcpy(&got, &(*loaded)[i], 4);
    EXPECT_EQ(got, want) << "element " << i;  // bit-exact, so -0.0 and denormals count
  }
}

TEST_F(InitialWeightsTest, LoadsLittleEndianBytes) {
  // 1.0f is 0x3f800000: on disk 00 00 80 3f.
  std::vector<unsigned char> bytes(48, 0);
  for (int i = 0; i < 12; ++i) {
    bytes[4 * i + 2] = 0x80;
    bytes[4 * i + 3] = 0x3f;
  }
  ASSERT_NO_FATAL_FAILURE(WriteBytes(bytes.data(), bytes.size()));
  StatusOr<std::vector<float>> loaded = LoadInitialWeights(path_, TwelveElementTable());
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded, std::vector<float>(12, 1.0f));
}

TEST_F(InitialWeightsTest, RefusesAFileOneFloatShortNamingBothSizes) {
  std::vector<float> values(11, 2.0f);
  ASSERT_NO_FATAL_FAILURE(WriteBytes(values.data(), values.size() * sizeof(float)));
  StatusOr<std::vector<float>> loaded = LoadInitialWeights(path_, TwelveElementTable());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(loaded.status(), "has 44 bytes"));
  EXPECT_TRUE(MessageHas(loaded.status(), "needs 48"));
  EXPECT_TRUE(MessageHas(loaded.status(), path_));
}

TEST_F(InitialWeightsTest, RefusesAFileOneByteLongNamingBothSizes) {
  std::vector<unsigned char> bytes(49, 0);
  ASSERT_NO_FATAL_FAILURE(WriteBytes(bytes.data(), bytes.size()));
  StatusOr<std::vector<float>> loaded = LoadInitialWeights(path_, TwelveElementTable());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(loaded.status(), "has 49 bytes"));
  EXPECT_TRUE(MessageHas(loaded.status(), "needs 48"));
}

TEST_F(InitialWeightsTest, RefusesAnEmptyFile) {
  ASSERT_NO_FATAL_FAILURE(WriteBytes("", 0));
  StatusOr<std::vector<float>> loaded = LoadInitialWeights(path_, TwelveElementTable());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(loaded.status(), "has 0 bytes"));
}

TEST_F(InitialWeightsTest, MissingFileIsNotFoundNamingThePath) {
  std::filesystem::remove(path_);
  StatusOr<std::vector<float>> loaded = LoadInitialWeights(path_, TwelveElementTable());
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(MessageHas(loaded.status(), "'" + path_ + "'"));
  EXPECT_TRUE(MessageHas(loaded.status(), "--init-weights"));
}

}  // namespace
}  // namespace phub::server
