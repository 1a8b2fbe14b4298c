#include "phub/transport/control_frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "phub/transport/control_channel.h"

namespace phub::transport {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::span<const std::byte> Bytes(const std::string& s) { return std::as_bytes(std::span(s)); }

std::string Prefix(std::uint32_t length) {
  std::string prefix(4, '\0');
  for (int i = 0; i < 4; ++i) prefix[i] = static_cast<char>(length >> (8 * i));
  return prefix;
}

std::string Framed(const proto::ControlMessage& message) { return *FrameControlMessage(message); }

proto::ControlMessage HelloWith(int tensors, bool named = true) {
  proto::ControlMessage message;
  proto::Hello* hello = message.mutable_hello();
  hello->set_protocol_version(1);
  hello->set_token_proof("s3cret");
  hello->set_rank(1);
  hello->set_world_size(4);
  for (int i = 0; i < tensors; ++i) {
    proto::TensorSpec* t = hello->add_tensors();
    if (named) {
      t->set_name("layer" + std::to_string(i) + ".weight");
      t->set_elements(1000u * (i + 1));
    }
  }
  return message;
}

proto::ControlMessage ErrorMessage(const std::string& text) {
  proto::ControlMessage message;
  message.mutable_error()->set_code(proto::Error::BAD_RANK);
  message.mutable_error()->set_message(text);
  return message;
}

TEST(ControlFrameDecoderTest, SplitAtEveryByteBoundaryDecodesTheSameMessage) {
  const proto::ControlMessage sent = HelloWith(5);
  const std::string frame = Framed(sent);
  for (std::size_t split = 0; split <= frame.size(); ++split) {
    ControlFrameDecoder decoder;
    ASSERT_TRUE(decoder.Feed(Bytes(frame).first(split)).ok()) << "split at " << split;
    if (split < frame.size()) {
      EXPECT_FALSE(decoder.has_message()) << "split at " << split;
      EXPECT_EQ(decoder.bytes_to_next_message(), split < 4 ? 4 - split : frame.size() - split);
    }
    ASSERT_TRUE(decoder.Feed(Bytes(frame).subspan(split)).ok()) << "split at " << split;
    std::optional<proto::ControlMessage> got = decoder.Pop();
    ASSERT_TRUE(got.has_value()) << "split at " << split;
    EXPECT_EQ(got->SerializeAsString(), sent.SerializeAsString()) << "split at " << split;
    EXPECT_FALSE(decoder.Pop().has_value());
    EXPECT_EQ(decoder.buffered_bytes(), 0u);
  }
}

TEST(ControlFrameDecoderTest, OneByteAtATimeDecodesTheSameMessage) {
  const proto::ControlMessage sent = HelloWith(3);
  const std::string frame = Framed(sent);
  ControlFrameDecoder decoder;
  for (std::size_t i = 0; i < frame.size(); ++i) {
    ASSERT_FALSE(decoder.has_message());
    ASSERT_TRUE(decoder.Feed(Bytes(frame).subspan(i, 1)).ok()) << "byte " << i;
  }
  std::optional<proto::ControlMessage> got = decoder.Pop();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->SerializeAsString(), sent.SerializeAsString());
}

TEST(ControlFrameDecoderTest, TwoMessagesInOneFeedComeOutInOrder) {
  proto::ControlMessage goodbye;
  goodbye.mutable_goodbye()->set_iterations(7);
  const proto::ControlMessage third = ErrorMessage("third");
  const std::string third_frame = Framed(third);
  // Two whole frames and the first half of a third in one Feed.
  const std::string bytes = Framed(ErrorMessage("first")) + Framed(goodbye) +
                            third_frame.substr(0, third_frame.size() / 2);
  ControlFrameDecoder decoder;
  ASSERT_TRUE(decoder.Feed(Bytes(bytes)).ok());
  std::optional<proto::ControlMessage> one = decoder.Pop();
  std::optional<proto::ControlMessage> two = decoder.Pop();
  ASSERT_TRUE(one.has_value());
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(one->error().message(), "first");
  EXPECT_EQ(two->goodbye().iterations(), 7u);
  EXPECT_FALSE(decoder.Pop().has_value());
  EXPECT_EQ(decoder.buffered_bytes(), third_frame.size() / 2);

  ASSERT_TRUE(decoder.Feed(Bytes(third_frame).subspan(third_frame.size() / 2)).ok());
  std::optional<proto::ControlMessage> three = decoder.Pop();
  ASSERT_TRUE(three.has_value());
  EXPECT_EQ(three->error().message(), "third");
}

TEST(ControlFrameDecoderTest, EmptyFrameIsAMessageWithNoBody) {
  ControlFrameDecoder decoder;
  ASSERT_TRUE(decoder.Feed(Bytes(Prefix(0))).ok());
  std::optional<proto::ControlMessage> got = decoder.Pop();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->body_case(), proto::ControlMessage::BODY_NOT_SET);
}

TEST(ControlFrameDecoderTest, AClaimOf256MiBInFourBytesHoldsOnlyThoseBytes) {
  ControlFrameLimits limits;
  limits.max_frame_bytes = 512u << 20;  // accept the claim, to see what waiting for it costs
  ControlFrameDecoder decoder(limits);
  ASSERT_TRUE(decoder.Feed(Bytes(Prefix(256u << 20))).ok());
  EXPECT_EQ(decoder.buffered_bytes(), 4u);
  EXPECT_EQ(decoder.bytes_to_next_message(), std::size_t{256} << 20);

  // Memory follows the bytes that actually come.
  const std::string some(kControlReadChunkBytes, 'x');
  ASSERT_TRUE(decoder.Feed(Bytes(some)).ok());
  EXPECT_EQ(decoder.buffered_bytes(), 4 + some.size());
  EXPECT_LT(decoder.buffered_bytes(), std::size_t{1} << 20);
}

TEST(ControlFrameDecoderTest, AFrameOverTheLimitIsRefusedOnItsPrefixNamingLimitAndFlag) {
  ControlFrameDecoder decoder;  // 4 MiB
  Status s = decoder.Feed(Bytes(Prefix(256u << 20)));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), AllOf(HasSubstr("268435456"), HasSubstr("4194304"),
                                              HasSubstr("--max-control-frame-bytes")));
  EXPECT_LE(decoder.buffered_bytes(), 4u);
}

TEST(ControlFrameDecoderTest, ErrorsNameTheFlagsTheCallerGave) {
  ControlFrameLimits limits;
  limits.max_frame_bytes = 100;
  limits.frame_flag = "--my-frame-limit";
  ControlFrameDecoder decoder(limits);
  Status s = decoder.Feed(Bytes(Prefix(101)));
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("101"), HasSubstr("100"), HasSubstr("--my-frame-limit")));
}

TEST(ControlFrameDecoderTest, AFrameAtTheLimitIsAccepted) {
  const std::string frame = Framed(HelloWith(2));
  ControlFrameLimits limits;
  limits.max_frame_bytes = static_cast<std::uint32_t>(frame.size() - 4);
  ControlFrameDecoder decoder(limits);
  ASSERT_TRUE(decoder.Feed(Bytes(frame)).ok());
  EXPECT_TRUE(decoder.Pop().has_value());
}

TEST(ControlFrameDecoderTest, AHelloWithTooManyTensorsIsRefusedNamingCountLimitAndFlag) {
  ControlFrameLimits limits;
  limits.max_tensors = 10;
  ControlFrameDecoder decoder(limits);
  // Empty TensorSpec entries: 2 bytes each on the wire, the amplification the limit is for.
  Status s = decoder.Feed(Bytes(Framed(HelloWith(11, /*named=*/false))));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              AllOf(HasSubstr("11 tensors"), HasSubstr("10"), HasSubstr("--max-tensors")));
  EXPECT_FALSE(decoder.has_message());
}

TEST(ControlFrameDecoderTest, AHelloAtTheTensorLimitIsAccepted) {
  ControlFrameLimits limits;
  limits.max_tensors = 10;
  ControlFrameDecoder decoder(limits);
  ASSERT_TRUE(decoder.Feed(Bytes(Framed(HelloWith(10)))).ok());
  std::optional<proto::ControlMessage> got = decoder.Pop();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->hello().tensors_size(), 10);
}

// protobuf merges a singular message field that appears twice, so the tensors of both count.
TEST(ControlFrameDecoderTest, TensorsOfARepeatedHelloFieldAreSummed) {
  const std::string body = HelloWith(6).SerializeAsString() + HelloWith(6).SerializeAsString();
  proto::ControlMessage merged;
  ASSERT_TRUE(merged.ParseFromString(body));
  ASSERT_EQ(merged.hello().tensors_size(), 12);
  StatusOr<std::uint64_t> count = CountHelloTensors(Bytes(body));
  ASSERT_TRUE(count.ok()) << count.status();
  EXPECT_EQ(*count, 12u);

  ControlFrameLimits limits;
  limits.max_tensors = 10;
  ControlFrameDecoder decoder(limits);
  EXPECT_FALSE(decoder.Feed(Bytes(Prefix(body.size()) + body)).ok());
}

TEST(ControlFrameDecoderTest, CountHelloTensorsIgnoresOtherMessages) {
  proto::ControlMessage welcome;
  welcome.mutable_welcome()->add_cores()->set_host("h");
  welcome.mutable_welcome()->add_chunk_owner(3);
  StatusOr<std::uint64_t> count = CountHelloTensors(Bytes(welcome.SerializeAsString()));
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 0u);
  count = CountHelloTensors(Bytes(HelloWith(37).SerializeAsString()));
  ASSERT_TRUE(count.ok());
  EXPECT_EQ(*count, 37u);
}

TEST(ControlFrameDecoderTest, GarbageThatDoesNotParseIsRefused) {
  const std::string junk(8, '\xff');  // a varint that never ends
  ControlFrameDecoder decoder;
  Status s = decoder.Feed(Bytes(Prefix(junk.size()) + junk));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("phub.proto.ControlMessage"));
}

TEST(ControlFrameDecoderTest, AHelloWhoseLengthRunsPastTheFrameIsRefused) {
  std::string body = HelloWith(3).SerializeAsString();
  body.resize(body.size() - 5);  // the hello field's length now claims more than there is
  ControlFrameDecoder decoder;
  Status s = decoder.Feed(Bytes(Prefix(body.size()) + body));
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("does not parse"));
}

TEST(ControlFrameDecoderTest, IsUnusableAfterAnErrorButKeepsWhatItDecodedBefore) {
  const std::string bytes = Framed(ErrorMessage("before")) + Prefix(3) + std::string(3, '\xff');
  ControlFrameDecoder decoder;
  Status first = decoder.Feed(Bytes(bytes));
  ASSERT_FALSE(first.ok());
  EXPECT_EQ(decoder.status(), first);
  Status again = decoder.Feed(Bytes(Framed(ErrorMessage("after"))));
  EXPECT_EQ(again, first);
  std::optional<proto::ControlMessage> got = decoder.Pop();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->error().message(), "before");
  EXPECT_FALSE(decoder.Pop().has_value());
}

TEST(ControlFrameDecoderTest, ALargeFrameLetsItsBufferGoOnceDecoded) {
  const proto::ControlMessage big = HelloWith(20000);
  const std::string frame = Framed(big);
  ASSERT_GT(frame.size(), 200000u);
  ControlFrameDecoder decoder;
  // In read-sized pieces, as the channel feeds it.
  for (std::size_t at = 0; at < frame.size(); at += kControlReadChunkBytes) {
    ASSERT_TRUE(
        decoder.Feed(Bytes(frame).subspan(at, std::min(kControlReadChunkBytes, frame.size() - at)))
            .ok());
  }
  EXPECT_EQ(decoder.buffered_bytes(), 0u);
  std::optional<proto::ControlMessage> got = decoder.Pop();
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(got->hello().tensors_size(), 20000);
}

}  // namespace
}  // namespace phub::transport
