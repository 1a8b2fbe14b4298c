// The TCP rendezvous's frames: every message type survives encode + decode fed in any split;
// what a hostile peer can send (lengths over the limit, trailing bytes, bad keys, unknown
// types, the wrong magic or version) is refused with a message that says what, and costs at
// most the bytes that arrived.
#include "phub/rendezvous/frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>

namespace phub::rendezvous {
namespace {

using ::testing::HasSubstr;

std::span<const std::byte> Bytes(const std::string& s) {
  return std::as_bytes(std::span(s.data(), s.size()));
}

std::vector<Message> AllTypes() {
  std::vector<Message> all;
  Message hello{.type = MessageType::kHello};
  hello.rank = 7;
  hello.world_size = 8;
  hello.job = "slurm-1234.5";
  all.push_back(hello);
  all.push_back(Message{.type = MessageType::kWelcome});
  Message publish{.type = MessageType::kPublish};
  publish.key = "rank3.addr";
  publish.value = std::string("10.0.0.3 4242\n\0\xff", 16);
  all.push_back(publish);
  Message largest{.type = MessageType::kPublish};
  largest.key = std::string(kMaxKeyBytes, 'k');
  largest.value = std::string(kMaxValueBytes, '\x01');
  all.push_back(largest);
  Message lookup{.type = MessageType::kLookup};
  lookup.key = "nccl.id";
  lookup.wait_ms = 30000;
  all.push_back(lookup);
  Message value{.type = MessageType::kValue};
  value.value = std::string(128, '\0');
  all.push_back(value);
  all.push_back(Message{.type = MessageType::kNotFound});
  Message remove{.type = MessageType::kRemove};
  remove.key = "nccl.id";
  all.push_back(remove);
  all.push_back(Message{.type = MessageType::kDone});
  all.push_back(Message{.type = MessageType::kOk});
  Message error{.type = MessageType::kError};
  error.retryable = true;
  error.text = "the rendezvous server holds its limit";
  all.push_back(error);
  return all;
}

TEST(RendezvousFrame, EveryMessageSurvivesEncodeAndDecodeInAnySplit) {
  std::string stream;
  for (const Message& m : AllTypes()) {
    auto frame = EncodeFrame(m);
    ASSERT_TRUE(frame.ok()) << frame.status();
    EXPECT_LE(frame->size(), kFramePrefixBytes + kMaxFrameBytes);
    stream += *frame;
  }
  for (std::size_t step : {std::size_t{1}, std::size_t{3}, std::size_t{7}, stream.size()}) {
    FrameDecoder decoder;
    for (std::size_t at = 0; at < stream.size(); at += step) {
      ASSERT_TRUE(decoder.Feed(Bytes(stream.substr(at, step))).ok()) << decoder.status();
    }
    EXPECT_FALSE(decoder.mid_frame());
    for (const Message& expected : AllTypes()) {
      auto got = decoder.Pop();
      ASSERT_TRUE(got.has_value()) << "step " << step;
      EXPECT_EQ(*got, expected) << MessageTypeName(expected.type) << ", step " << step;
    }
    EXPECT_FALSE(decoder.Pop().has_value());
  }
}

TEST(RendezvousFrame, AnOversizedLengthIsRefusedOnItsFourBytes) {
  FrameDecoder decoder;
  const std::uint32_t length = 0xFFFFFFF0u;
  std::string prefix(4, '\0');
  std::memcpy(prefix.data(), &length, 4);
  const Status s = decoder.Feed(Bytes(prefix));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("over the limit"));
  EXPECT_LE(decoder.buffered_bytes(), 4u);
  // Unusable afterwards, with the same error.
  EXPECT_EQ(decoder.Feed(Bytes(std::string(10, 'x'))), s);
}

TEST(RendezvousFrame, AFrameIsBufferedOnlyAsItsBytesArrive) {
  FrameDecoder decoder;
  const std::uint32_t length = kMaxFrameBytes;
  std::string prefix(4, '\0');
  std::memcpy(prefix.data(), &length, 4);
  ASSERT_TRUE(decoder.Feed(Bytes(prefix + "\x03")).ok());
  EXPECT_TRUE(decoder.mid_frame());
  EXPECT_EQ(decoder.buffered_bytes(), 5u);
}

TEST(RendezvousFrame, HostileBodiesAreRefusedSayingWhy) {
  auto body_of = [](const Message& m) { return EncodeFrame(m)->substr(kFramePrefixBytes); };
  Message publish{.type = MessageType::kPublish};
  publish.key = "k";
  publish.value = "v";
  struct Case {
    std::string body;
    std::string says;
  };
  std::string wrong_magic = body_of(Message{.type = MessageType::kHello});
  wrong_magic[1] ^= 0x20;
  std::string wrong_version = body_of(Message{.type = MessageType::kHello});
  wrong_version[5] = 9;
  std::string key_past_end = body_of(publish);
  key_past_end[1] = 100;  // the key's length claims more than the body holds
  std::string bad_key = body_of(publish);
  bad_key[3] = '/';
  const std::vector<Case> cases = {
      {"", "empty"},
      {"\x63", "unknown type 99"},
      {body_of(publish) + "x", "bytes after its last field"},
      {wrong_magic, "magic"},
      {wrong_version, "protocol version 9"},
      {key_past_end, "cut short"},
      {bad_key, "may hold only"},
      {std::string("\x0a\x02\x00\x00", 4), "retryable flag"},
  };
  for (const Case& c : cases) {
    auto m = DecodeBody(Bytes(c.body));
    ASSERT_FALSE(m.ok()) << c.says;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(m.status().message()), HasSubstr(c.says));
  }
}

TEST(RendezvousFrame, TheEncoderRefusesWhatTheDecoderWould) {
  Message m{.type = MessageType::kPublish};
  m.key = "../etc/passwd";
  m.value = "x";
  EXPECT_EQ(EncodeFrame(m).status().code(), absl::StatusCode::kInvalidArgument);
  m.key = "ok";
  m.value = std::string(kMaxValueBytes + 1, 'v');
  EXPECT_EQ(EncodeFrame(m).status().code(), absl::StatusCode::kInvalidArgument);
  m.type = static_cast<MessageType>(42);
  EXPECT_EQ(EncodeFrame(m).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(RendezvousFrame, KeysAndJobIdsAreFileNameSafe) {
  EXPECT_TRUE(CheckKey("rank12.addr").ok());
  EXPECT_TRUE(CheckKey("nccl.id").ok());
  EXPECT_FALSE(CheckKey("").ok());
  EXPECT_FALSE(CheckKey(".hidden").ok());
  EXPECT_FALSE(CheckKey("..").ok());
  EXPECT_FALSE(CheckKey("a/b").ok());
  EXPECT_FALSE(CheckKey(std::string(kMaxKeyBytes + 1, 'a')).ok());
  EXPECT_TRUE(CheckJob("").ok());
  EXPECT_TRUE(CheckJob("12345_7").ok());
  EXPECT_FALSE(CheckJob("a b").ok());
}

TEST(RendezvousFrame, PrintableEscapesAndBounds) {
  EXPECT_EQ(Printable(std::string("a\x01\\b", 4)), "a\\x01\\x5cb");
  EXPECT_EQ(Printable(std::string(300, 'z'), 4), "zzzz... (300 bytes)");
}

}  // namespace
}  // namespace phub::rendezvous
