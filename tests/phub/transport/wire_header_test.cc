#include "phub/transport/wire_header.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

#include "phub/common/version.h"

namespace phub::transport {
namespace {

constexpr std::uint32_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();
constexpr std::uint64_t kMaxU64 = std::numeric_limits<std::uint64_t>::max();

// The message names the field and the value; check by substring.
::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

// Writes `value` little-endian at `offset`, independently of the code under test.
template <typename T>
void Poke(EncodedHeader& bytes, std::size_t offset, T value) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    bytes[offset + i] =
        static_cast<std::byte>((static_cast<std::uint64_t>(value) >> (8 * i)) & 0xff);
  }
}

// Reads a little-endian value at `offset`, independently of the code under test.
template <typename T>
T Peek(const EncodedHeader& bytes, std::size_t offset) {
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    value |= static_cast<std::uint64_t>(bytes[offset + i]) << (8 * i);
  }
  return static_cast<T>(value);
}

EncodedHeader ValidHeader() { return EncodeWireHeader(WireHeader{Op::kPush, 3, 7, 11, 16}); }

constexpr Op kAllOps[] = {Op::kPush, Op::kWeights, Op::kInit, Op::kAttach, Op::kBye, Op::kError};

TEST(WireHeaderTest, EveryOpRoundTripsWithMaximalFields) {
  for (Op op : kAllOps) {
    WireHeader in{op, kMaxU32, kMaxU32, kMaxU64, kMaxPayloadBytes};
    StatusOr<WireHeader> out = DecodeWireHeader(EncodeWireHeader(in));
    ASSERT_TRUE(out.ok()) << OpName(op) << ": " << out.status();
    EXPECT_EQ(out->op, op);
    EXPECT_EQ(out->worker, kMaxU32);
    EXPECT_EQ(out->chunk, kMaxU32);
    EXPECT_EQ(out->iteration, kMaxU64);
    EXPECT_EQ(out->payload_bytes, kMaxPayloadBytes);
  }
}

TEST(WireHeaderTest, EveryOpRoundTripsWithZeroFields) {
  for (Op op : kAllOps) {
    StatusOr<WireHeader> out = DecodeWireHeader(EncodeWireHeader(WireHeader{op, 0, 0, 0, 0}));
    ASSERT_TRUE(out.ok()) << OpName(op) << ": " << out.status();
    EXPECT_EQ(out->op, op);
    EXPECT_EQ(out->worker, 0u);
    EXPECT_EQ(out->chunk, 0u);
    EXPECT_EQ(out->iteration, 0u);
    EXPECT_EQ(out->payload_bytes, 0u);
  }
}

TEST(WireHeaderTest, DistinctByteValuesRoundTripWithoutMixingFields) {
  // Every byte of every field different, so a swapped or truncated field shows.
  WireHeader in{Op::kWeights, 0x04030201u, 0x08070605u, 0x100f0e0d0c0b0a09ull, 0x14131211u};
  StatusOr<WireHeader> out = DecodeWireHeader(EncodeWireHeader(in));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->op, Op::kWeights);
  EXPECT_EQ(out->worker, 0x04030201u);
  EXPECT_EQ(out->chunk, 0x08070605u);
  EXPECT_EQ(out->iteration, 0x100f0e0d0c0b0a09ull);
  EXPECT_EQ(out->payload_bytes, 0x14131211u);
}

TEST(WireHeaderTest, EncodesFieldsAtDocumentedOffsetsLittleEndian) {
  EncodedHeader bytes = EncodeWireHeader(
      WireHeader{Op::kAttach, 0x11223344u, 0x55667788u, 0x0102030405060708ull, 0x0a0b0c0du});
  ASSERT_EQ(bytes.size(), 32u);
  EXPECT_EQ(bytes[0], std::byte{'P'});
  EXPECT_EQ(bytes[1], std::byte{'H'});
  EXPECT_EQ(bytes[2], std::byte{'U'});
  EXPECT_EQ(bytes[3], std::byte{'B'});
  EXPECT_EQ(Peek<std::uint16_t>(bytes, 4), kProtocolVersion);
  EXPECT_EQ(bytes[6], std::byte{4});  // kAttach
  EXPECT_EQ(bytes[7], std::byte{0});  // flags
  EXPECT_EQ(Peek<std::uint32_t>(bytes, 8), 0x11223344u);
  EXPECT_EQ(bytes[8], std::byte{0x44});  // least significant byte first
  EXPECT_EQ(Peek<std::uint32_t>(bytes, 12), 0x55667788u);
  EXPECT_EQ(Peek<std::uint64_t>(bytes, 16), 0x0102030405060708ull);
  EXPECT_EQ(bytes[16], std::byte{0x08});
  EXPECT_EQ(bytes[23], std::byte{0x01});
  EXPECT_EQ(Peek<std::uint32_t>(bytes, 24), 0x0a0b0c0du);
  EXPECT_EQ(Peek<std::uint32_t>(bytes, 28), 0u);  // reserved
}

TEST(WireHeaderTest, OpCodesMatchTheProtocol) {
  const std::pair<Op, std::uint8_t> expected[] = {{Op::kPush, 1}, {Op::kWeights, 2},
                                                  {Op::kInit, 3}, {Op::kAttach, 4},
                                                  {Op::kBye, 5},  {Op::kError, 6}};
  for (auto [op, code] : expected) {
    EXPECT_EQ(EncodeWireHeader(WireHeader{op, 0, 0, 0, 0})[6], std::byte{code}) << OpName(op);
  }
}

TEST(WireHeaderTest, DecodesHandWrittenBytes) {
  EncodedHeader bytes{};
  bytes[0] = std::byte{'P'};
  bytes[1] = std::byte{'H'};
  bytes[2] = std::byte{'U'};
  bytes[3] = std::byte{'B'};
  Poke<std::uint16_t>(bytes, 4, kProtocolVersion);
  Poke<std::uint8_t>(bytes, 6, 2);
  Poke<std::uint32_t>(bytes, 8, 9);
  Poke<std::uint32_t>(bytes, 12, 1234567);
  Poke<std::uint64_t>(bytes, 16, 1ull << 40);
  Poke<std::uint32_t>(bytes, 24, 4096);
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->op, Op::kWeights);
  EXPECT_EQ(out->worker, 9u);
  EXPECT_EQ(out->chunk, 1234567u);
  EXPECT_EQ(out->iteration, 1ull << 40);
  EXPECT_EQ(out->payload_bytes, 4096u);
}

TEST(WireHeaderTest, RejectsBadMagicNamingIt) {
  EncodedHeader bytes = ValidHeader();
  bytes[0] = std::byte{'X'};
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), "magic"));
  EXPECT_TRUE(MessageHas(out.status(), "42554858"));  // what arrived ("XHUB")
  EXPECT_TRUE(MessageHas(out.status(), "42554850"));  // what was expected ("PHUB")
}

TEST(WireHeaderTest, RejectsOtherProtocolVersionNamingBoth) {
  EncodedHeader bytes = ValidHeader();
  const std::uint16_t other = kProtocolVersion + 41;
  Poke<std::uint16_t>(bytes, 4, other);
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), "version"));
  EXPECT_TRUE(MessageHas(out.status(), std::to_string(other)));
  EXPECT_TRUE(MessageHas(out.status(), std::to_string(kProtocolVersion)));
}

TEST(WireHeaderTest, RejectsOpZero) {
  EncodedHeader bytes = ValidHeader();
  Poke<std::uint8_t>(bytes, 6, 0);
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), "unknown op 0"));
}

TEST(WireHeaderTest, RejectsOpsAboveError) {
  for (int op : {7, 8, 100, 255}) {
    EncodedHeader bytes = ValidHeader();
    Poke<std::uint8_t>(bytes, 6, static_cast<std::uint8_t>(op));
    StatusOr<WireHeader> out = DecodeWireHeader(bytes);
    ASSERT_FALSE(out.ok()) << "op " << op;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(out.status(), "unknown op " + std::to_string(op)));
  }
}

TEST(WireHeaderTest, RejectsNonZeroFlagsNamingTheValue) {
  EncodedHeader bytes = ValidHeader();
  Poke<std::uint8_t>(bytes, 7, 0x80);
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), "flags"));
  EXPECT_TRUE(MessageHas(out.status(), "128"));
}

TEST(WireHeaderTest, RejectsNonZeroReservedNamingTheValue) {
  EncodedHeader bytes = ValidHeader();
  Poke<std::uint32_t>(bytes, 28, 0xdeadbeefu);
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(out.status(), "reserved"));
  EXPECT_TRUE(MessageHas(out.status(), std::to_string(0xdeadbeefu)));
}

TEST(WireHeaderTest, RejectsOnlyTheHighestReservedByte) {
  // A check that looked at fewer than all four reserved bytes would let this through.
  EncodedHeader bytes = ValidHeader();
  bytes[31] = std::byte{1};
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_FALSE(out.ok());
  EXPECT_TRUE(MessageHas(out.status(), "reserved"));
}

TEST(WireHeaderTest, AcceptsPayloadAtTheLimit) {
  EncodedHeader bytes = ValidHeader();
  Poke<std::uint32_t>(bytes, 24, kMaxPayloadBytes);
  StatusOr<WireHeader> out = DecodeWireHeader(bytes);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->payload_bytes, kMaxPayloadBytes);
}

TEST(WireHeaderTest, RejectsPayloadAboveTheLimitNamingBoth) {
  for (std::uint32_t payload : {kMaxPayloadBytes + 1, kMaxU32}) {
    EncodedHeader bytes = ValidHeader();
    Poke<std::uint32_t>(bytes, 24, payload);
    StatusOr<WireHeader> out = DecodeWireHeader(bytes);
    ASSERT_FALSE(out.ok()) << payload;
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(MessageHas(out.status(), "payload"));
    EXPECT_TRUE(MessageHas(out.status(), std::to_string(payload)));
    EXPECT_TRUE(MessageHas(out.status(), std::to_string(kMaxPayloadBytes)));
  }
}

TEST(WireHeaderTest, OpNameNamesKnownAndUnknownOps) {
  EXPECT_EQ(OpName(Op::kPush), "PUSH");
  EXPECT_EQ(OpName(Op::kWeights), "WEIGHTS");
  EXPECT_EQ(OpName(Op::kInit), "INIT");
  EXPECT_EQ(OpName(Op::kAttach), "ATTACH");
  EXPECT_EQ(OpName(Op::kBye), "BYE");
  EXPECT_EQ(OpName(Op::kError), "ERROR");
  EXPECT_EQ(OpName(static_cast<Op>(9)), "op(9)");
}

}  // namespace
}  // namespace phub::transport
