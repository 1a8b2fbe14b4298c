// ReadCopyCount (phub/server/shard/copy_count.h): the count of copies a rack's sum carries in
// its last element, in each wire format, is taken only when it is a whole number of 0 to the
// sender's rack's workers; anything else a peer could send is refused, saying what came.
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

// A copy of 3 elements in `format`, the last `count`, the others junk.
std::vector<std::byte> Copy(kernels::WireFormat format, float count) {
  std::vector<std::byte> bytes(3 * kernels::WireBytes(format), std::byte{0x7f});
  std::byte* last = bytes.data() + 2 * kernels::WireBytes(format);
  switch (format) {
    case kernels::WireFormat::kFp32:
      std::memcpy(last, &count, sizeof count);
      break;
    case kernels::WireFormat::kBf16: {
      const kernels::Bf16 x = kernels::ToBf16(count);
      std::memcpy(last, &x, sizeof x);
      break;
    }
    case kernels::WireFormat::kFp16: {
      const kernels::Fp16 x = kernels::ToFp16(count);
      std::memcpy(last, &x, sizeof x);
      break;
    }
  }
  return bytes;
}

TEST(CopyCountTest, EveryWholeCountUpToTheRacksWorkersIsReadInEveryFormat) {
  for (kernels::WireFormat format :
       {kernels::WireFormat::kFp32, kernels::WireFormat::kBf16, kernels::WireFormat::kFp16}) {
    const std::uint32_t most = kernels::MaxExactInteger(format);
    for (std::uint32_t count : {0u, 1u, 2u, 7u, most - 1, most}) {
      StatusOr<std::uint32_t> read =
          ReadCopyCount(Copy(format, static_cast<float>(count)), format, most);
      ASSERT_TRUE(read.ok()) << kernels::WireFormatName(format) << " " << count << ": "
                             << read.status();
      EXPECT_EQ(*read, count) << kernels::WireFormatName(format);
    }
  }
}

TEST(CopyCountTest, ACountNoRackCouldHaveIsRefusedSayingWhatCame) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (kernels::WireFormat format :
       {kernels::WireFormat::kFp32, kernels::WireFormat::kBf16, kernels::WireFormat::kFp16}) {
    for (float count : {5.0f, 2.5f, -1.0f, nan, inf, -inf}) {
      StatusOr<std::uint32_t> read = ReadCopyCount(Copy(format, count), format, 4);
      ASSERT_FALSE(read.ok()) << kernels::WireFormatName(format) << " " << count;
      EXPECT_THAT(read.status().message(), HasSubstr("not a whole number of 0 to 4"));
    }
  }
  EXPECT_FALSE(ReadCopyCount({}, kernels::WireFormat::kFp32, 4).ok());
}

}  // namespace
}  // namespace phub::server
