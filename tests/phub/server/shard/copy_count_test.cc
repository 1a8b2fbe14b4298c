// ReadRackCount (phub/server/shard/copy_count.h): the counts a rack's sum carries in its last
// two elements — of copies, then of the rack's members that iteration — in each wire format,
// are taken only when both are whole numbers with copies <= members <= the sender's rack's
// workers; anything else a peer could send is refused, saying which count came as what.
#include "phub/server/shard/copy_count.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace phub::server {
namespace {

using ::testing::HasSubstr;

void Put(std::byte* at, kernels::WireFormat format, float value) {
  switch (format) {
    case kernels::WireFormat::kFp32:
      std::memcpy(at, &value, sizeof value);
      break;
    case kernels::WireFormat::kBf16: {
      const kernels::Bf16 x = kernels::ToBf16(value);
      std::memcpy(at, &x, sizeof x);
      break;
    }
    case kernels::WireFormat::kFp16: {
      const kernels::Fp16 x = kernels::ToFp16(value);
      std::memcpy(at, &x, sizeof x);
      break;
    }
  }
}

// A copy of 3 elements and the two counts in `format`, the elements junk.
std::vector<std::byte> Copy(kernels::WireFormat format, float copies, float members) {
  const std::size_t bytes = kernels::WireBytes(format);
  std::vector<std::byte> slot((3 + kCountElements) * bytes, std::byte{0x7f});
  Put(slot.data() + 3 * bytes, format, copies);
  Put(slot.data() + 4 * bytes, format, members);
  return slot;
}

constexpr kernels::WireFormat kFormats[] = {kernels::WireFormat::kFp32,
                                            kernels::WireFormat::kBf16,
                                            kernels::WireFormat::kFp16};

TEST(CopyCountTest, EveryWholeCountUpToTheRacksWorkersIsReadInEveryFormat) {
  for (kernels::WireFormat format : kFormats) {
    const std::uint32_t most = kernels::MaxExactInteger(format);
    for (std::uint32_t members : {0u, 1u, 2u, 7u, most - 1, most}) {
      for (std::uint32_t copies : {0u, members / 2, members}) {
        StatusOr<RackCount> read = ReadRackCount(
            Copy(format, static_cast<float>(copies), static_cast<float>(members)), format, most);
        ASSERT_TRUE(read.ok()) << kernels::WireFormatName(format) << " " << copies << " of "
                               << members << ": " << read.status();
        EXPECT_EQ(read->copies, copies) << kernels::WireFormatName(format);
        EXPECT_EQ(read->members, members) << kernels::WireFormatName(format);
      }
    }
  }
}

TEST(CopyCountTest, ACountOfCopiesNoRackCouldHaveIsRefusedSayingWhatCame) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (kernels::WireFormat format : kFormats) {
    // Members 4 of a rack of 4: more copies than members, fractions, and what is no number.
    for (float copies : {5.0f, 2.5f, -1.0f, nan, inf, -inf}) {
      StatusOr<RackCount> read = ReadRackCount(Copy(format, copies, 4), format, 4);
      ASSERT_FALSE(read.ok()) << kernels::WireFormatName(format) << " " << copies;
      EXPECT_THAT(read.status().message(), HasSubstr("its count of copies is "));
      EXPECT_THAT(read.status().message(),
                  HasSubstr("not a whole number of 0 to 4 (its count of members)"));
    }
  }
  // 3 copies of a rack whose schedule gave the iteration 2 members: refused though the rack has 4.
  StatusOr<RackCount> read = ReadRackCount(Copy(kernels::WireFormat::kFp32, 3, 2),
                                           kernels::WireFormat::kFp32, 4);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(),
              HasSubstr("its count of copies is 3, not a whole number of 0 to 2"));
}

TEST(CopyCountTest, ACountOfMembersNoRackCouldHaveIsRefusedSayingWhatCame) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (kernels::WireFormat format : kFormats) {
    for (float members : {5.0f, 2.5f, -1.0f, nan, inf, -inf}) {
      StatusOr<RackCount> read = ReadRackCount(Copy(format, 0, members), format, 4);
      ASSERT_FALSE(read.ok()) << kernels::WireFormatName(format) << " " << members;
      EXPECT_THAT(read.status().message(), HasSubstr("its count of members is "));
      EXPECT_THAT(read.status().message(),
                  HasSubstr("not a whole number of 0 to 4 (the sender's rack's workers)"));
    }
  }
}

TEST(CopyCountTest, ASumTooShortForItsCountsIsRefused) {
  EXPECT_FALSE(ReadRackCount({}, kernels::WireFormat::kFp32, 4).ok());
  const std::vector<std::byte> one(sizeof(float));
  EXPECT_FALSE(ReadRackCount(one, kernels::WireFormat::kFp32, 4).ok());
}

}  // namespace
}  // namespace phub::server
