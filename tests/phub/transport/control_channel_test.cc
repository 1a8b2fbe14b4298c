#include "phub/transport/control_channel.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <utility>

#include "phub/transport/event_loop.h"

namespace phub::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

// Only to turn a hang into a failure.
constexpr auto kTimeout = std::chrono::seconds(10);

::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

// Two connected loopback sockets on `context`, made with blocking calls.
std::pair<tcp::socket, tcp::socket> ConnectedPair(asio::io_context& context) {
  tcp::acceptor acceptor(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  tcp::socket client(context);
  client.connect(acceptor.local_endpoint());  // completes from the listen backlog
  tcp::socket server = acceptor.accept();
  return {std::move(client), std::move(server)};
}

proto::ControlMessage SampleHello() {
  proto::ControlMessage message;
  proto::Hello* hello = message.mutable_hello();
  hello->set_protocol_version(1);
  hello->set_token_proof("s3cret");
  hello->set_rank(3);
  hello->set_world_size(8);
  for (int i = 0; i < 50; ++i) {
    proto::TensorSpec* t = hello->add_tensors();
    t->set_name("layer" + std::to_string(i) + ".weight");
    t->set_elements(1000003ull * (i + 1));
  }
  return message;
}

void WriteLengthPrefix(tcp::socket& socket, std::uint32_t length) {
  unsigned char prefix[4] = {
      static_cast<unsigned char>(length), static_cast<unsigned char>(length >> 8),
      static_cast<unsigned char>(length >> 16), static_cast<unsigned char>(length >> 24)};
  asio::write(socket, asio::buffer(prefix, 4));
}

TEST(ControlChannelTest, FrameIsLittleEndianLengthThenSerializedMessage) {
  proto::ControlMessage message = SampleHello();
  const std::string body = message.SerializeAsString();
  std::shared_ptr<std::string> framed = FrameControlMessage(message);
  ASSERT_EQ(framed->size(), 4 + body.size());
  const auto* p = reinterpret_cast<const unsigned char*>(framed->data());
  const std::uint32_t length =
      p[0] | p[1] << 8 | p[2] << 16 | static_cast<std::uint32_t>(p[3]) << 24;
  EXPECT_EQ(length, body.size());
  EXPECT_EQ(framed->substr(4), body);
}

TEST(ControlChannelTest, BlockingWriteThenReadRoundTrips) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  const proto::ControlMessage sent = SampleHello();
  ASSERT_TRUE(WriteControlMessage(a, sent).ok());

  StatusOr<proto::ControlMessage> got = ReadControlMessage(b);
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_hello());
  EXPECT_EQ(got->hello().token_proof(), "s3cret");
  EXPECT_EQ(got->hello().rank(), 3u);
  EXPECT_EQ(got->hello().world_size(), 8u);
  ASSERT_EQ(got->hello().tensors_size(), 50);
  EXPECT_EQ(got->hello().tensors(49).name(), "layer49.weight");
  EXPECT_EQ(got->hello().tensors(49).elements(), 1000003ull * 50);
  EXPECT_EQ(got->SerializeAsString(), sent.SerializeAsString());
}

TEST(ControlChannelTest, BackToBackMessagesKeepTheirBoundaries) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  proto::ControlMessage first;
  first.mutable_error()->set_code(proto::Error::BAD_RANK);
  first.mutable_error()->set_message("rank 9 is out of range");
  proto::ControlMessage empty_goodbye;  // serializes to a short body; the oneof still set
  empty_goodbye.mutable_goodbye();
  ASSERT_TRUE(WriteControlMessage(a, first).ok());
  ASSERT_TRUE(WriteControlMessage(a, empty_goodbye).ok());

  StatusOr<proto::ControlMessage> one = ReadControlMessage(b);
  StatusOr<proto::ControlMessage> two = ReadControlMessage(b);
  ASSERT_TRUE(one.ok()) << one.status();
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(one->error().code(), proto::Error::BAD_RANK);
  EXPECT_EQ(one->error().message(), "rank 9 is out of range");
  EXPECT_TRUE(two->has_goodbye());
}

TEST(ControlChannelTest, ReadRejectsAnOversizeLengthNamingIt) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  const std::uint32_t limit = ControlFrameLimits{}.max_frame_bytes;
  const std::uint32_t length = limit + 1;
  WriteLengthPrefix(a, length);

  StatusOr<proto::ControlMessage> got = ReadControlMessage(b);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(got.status(), std::to_string(length)));
  EXPECT_TRUE(MessageHas(got.status(), std::to_string(limit)));
  EXPECT_TRUE(MessageHas(got.status(), "--max-control-frame-bytes"));
}

TEST(ControlChannelTest, ReadUsesTheCallersLimits) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  ASSERT_TRUE(WriteControlMessage(a, SampleHello()).ok());
  ControlFrameLimits limits;
  limits.max_tensors = 49;

  StatusOr<proto::ControlMessage> got = ReadControlMessage(b, limits);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(MessageHas(got.status(), "--max-tensors"));
}

// A peer may send two messages in one segment: the connection's decoder keeps the second.
TEST(ControlChannelTest, ReadWithAKeptDecoderReturnsBothMessagesOfOneWrite) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  proto::ControlMessage first;
  first.mutable_error()->set_message("one");
  proto::ControlMessage second;
  second.mutable_goodbye()->set_iterations(2);
  const std::string both = *FrameControlMessage(first) + *FrameControlMessage(second);
  asio::write(a, asio::buffer(both));

  ControlFrameDecoder decoder;
  StatusOr<proto::ControlMessage> one = ReadControlMessage(b, decoder);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->error().message(), "one");
  StatusOr<proto::ControlMessage> two = ReadControlMessage(b, decoder);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->goodbye().iterations(), 2u);
}

// Without a kept decoder a read takes exactly one frame and leaves the next in the socket.
TEST(ControlChannelTest, ReadWithoutADecoderNeverReadsPastItsMessage) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  proto::ControlMessage first;
  first.mutable_error()->set_message("one");
  const std::string both = *FrameControlMessage(first) + *FrameControlMessage(SampleHello());
  asio::write(a, asio::buffer(both));

  StatusOr<proto::ControlMessage> one = ReadControlMessage(b);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(b.available(), both.size() - FrameControlMessage(first)->size());
  StatusOr<proto::ControlMessage> two = ReadControlMessage(b);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->hello().tensors_size(), 50);
}

// 4 bytes claiming 256 MiB (accepted by a raised limit), then the peer leaves: the read fails
// as Unavailable having held only what arrived, and says how far it got.
TEST(ControlChannelTest, AClaimThatNeverComesEndsUnavailableWhenThePeerLeaves) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  WriteLengthPrefix(a, 256u << 20);
  asio::write(a, asio::buffer(std::string(1000, 'x')));
  a.close();
  ControlFrameLimits limits;
  limits.max_frame_bytes = 512u << 20;
  ControlFrameDecoder decoder(limits);

  StatusOr<proto::ControlMessage> got = ReadControlMessage(b, decoder);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(decoder.buffered_bytes(), 1004u);
  EXPECT_TRUE(MessageHas(got.status(), "1004 bytes into a message"));
}

// A peer that is stopped (SIGSTOP) or hung: its kernel accepted the connection and sends
// nothing. The timed read gives up after its timeout; a plain read would wait for good.
TEST(ControlChannelTest, ReadWithATimeoutGivesUpOnASilentPeer) {
  asio::io_context context;
  auto [client, server] = ConnectedPair(context);
  const auto start = std::chrono::steady_clock::now();
  StatusOr<proto::ControlMessage> read =
      ReadControlMessage(server, std::chrono::milliseconds(200));
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - start);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(MessageHas(read.status(), "no message within 200 ms"));
  EXPECT_GE(took.count(), 200);
  EXPECT_LT(took.count(), 200 + 5000);  // generous slack: only a hang fails
}

TEST(ControlChannelTest, ReadWithATimeoutNamesAMessageCutShort) {
  asio::io_context context;
  auto [client, server] = ConnectedPair(context);
  WriteLengthPrefix(client, 100);
  const char part[10] = {};
  asio::write(client, asio::buffer(part));
  StatusOr<proto::ControlMessage> read =
      ReadControlMessage(server, std::chrono::milliseconds(200));
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(MessageHas(read.status(), "one had begun to arrive"));
}

TEST(ControlChannelTest, ReadWithATimeoutTakesAMessageThatComesInTime) {
  asio::io_context context;
  auto [client, server] = ConnectedPair(context);
  auto writer = std::async(std::launch::async, [&client] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    return WriteControlMessage(client, SampleHello());
  });
  StatusOr<proto::ControlMessage> read = ReadControlMessage(server, kTimeout);
  ASSERT_TRUE(writer.get().ok());
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->SerializeAsString(), SampleHello().SerializeAsString());
}

TEST(ControlChannelTest, ReadRejectsABodyThatDoesNotParse) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  const std::string junk(8, '\xff');  // not a valid protobuf encoding
  WriteLengthPrefix(a, junk.size());
  asio::write(a, asio::buffer(junk));

  StatusOr<proto::ControlMessage> got = ReadControlMessage(b);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(got.status(), "ControlMessage"));
}

TEST(ControlChannelTest, ReadFromAClosedPeerIsUnavailable) {
  asio::io_context context;
  auto [a, b] = ConnectedPair(context);
  WriteLengthPrefix(a, 100);  // promises a body, then leaves
  a.close();

  StatusOr<proto::ControlMessage> got = ReadControlMessage(b);
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
}

// The asynchronous read runs on an EventLoop; the callback's result crosses to the test thread
// through a promise.
class AsyncControlReadTest : public ::testing::Test {
 protected:
  void SetUp() override {
    loop_.Run([&] {
      auto [a, b] = ConnectedPair(loop_.context());
      writer_.emplace(std::move(a));
      reader_.emplace(std::move(b));
    });
  }
  void TearDown() override {
    loop_.Run([&] {
      reader_.reset();
      writer_.reset();
    });
  }

  // Starts one AsyncReadControlMessage on the loop and waits for its result.
  // With `decoder`, the read that keeps it across messages.
  StatusOr<proto::ControlMessage> ReadOnLoop(
      std::shared_ptr<ControlFrameDecoder> decoder = nullptr) {
    std::promise<StatusOr<proto::ControlMessage>> result;
    loop_.Post([&] {
      auto done = [&](StatusOr<proto::ControlMessage> message) {
        result.set_value(std::move(message));
      };
      if (decoder) {
        AsyncReadControlMessage(*reader_, decoder, done);
      } else {
        AsyncReadControlMessage(*reader_, done);
      }
    });
    std::future<StatusOr<proto::ControlMessage>> future = result.get_future();
    if (future.wait_for(kTimeout) != std::future_status::ready) {
      ADD_FAILURE() << "the asynchronous read did not finish";
      loop_.Run([&] { reader_->close(); });  // cancels it, so `result` is set before we return
      return future.get();
    }
    // The loop thread may still be inside the completion handler, dropping its copies of the
    // Status. Wait until it has left it: the Status refcount lives in the (uninstrumented)
    // system abseil, so TSan cannot see that sharing the Status across threads is safe and
    // would report our later reads of it as racing with the loop's last unref.
    loop_.Run([] {});
    return future.get();
  }

  EventLoop loop_{"control-test", -1};
  // Sockets of loop_'s context; the writer is used with blocking calls from the test thread.
  std::optional<tcp::socket> writer_;
  std::optional<tcp::socket> reader_;
};

TEST_F(AsyncControlReadTest, RoundTripsAMessage) {
  const proto::ControlMessage sent = SampleHello();
  ASSERT_TRUE(WriteControlMessage(*writer_, sent).ok());
  StatusOr<proto::ControlMessage> got = ReadOnLoop();
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->SerializeAsString(), sent.SerializeAsString());
}

TEST_F(AsyncControlReadTest, AKeptDecoderReturnsBothMessagesOfOneWriteInOrder) {
  proto::ControlMessage first;
  first.mutable_error()->set_message("one");
  const std::string both = *FrameControlMessage(first) + *FrameControlMessage(SampleHello());
  asio::write(*writer_, asio::buffer(both));

  auto decoder = std::make_shared<ControlFrameDecoder>(ControlFrameLimits{});
  StatusOr<proto::ControlMessage> one = ReadOnLoop(decoder);
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->error().message(), "one");
  // Both frames came in one read, so the second is answered from the decoder.
  EXPECT_TRUE(decoder->has_message());
  StatusOr<proto::ControlMessage> two = ReadOnLoop(decoder);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->hello().tensors_size(), 50);
}

TEST_F(AsyncControlReadTest, AKeptDecoderAfterAnErrorAnswersWithIt) {
  ControlFrameLimits limits;
  limits.max_tensors = 1;
  auto decoder = std::make_shared<ControlFrameDecoder>(limits);
  ASSERT_TRUE(WriteControlMessage(*writer_, SampleHello()).ok());
  StatusOr<proto::ControlMessage> got = ReadOnLoop(decoder);
  ASSERT_FALSE(got.ok());
  EXPECT_TRUE(MessageHas(got.status(), "--max-tensors"));
  StatusOr<proto::ControlMessage> again = ReadOnLoop(decoder);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status(), got.status());
}

TEST_F(AsyncControlReadTest, RejectsAnOversizeLengthNamingIt) {
  WriteLengthPrefix(*writer_, 0xffffffffu);
  StatusOr<proto::ControlMessage> got = ReadOnLoop();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(got.status(), "4294967295"));
}

TEST_F(AsyncControlReadTest, PeerClosingIsUnavailable) {
  loop_.Run([&] { writer_->close(); });
  StatusOr<proto::ControlMessage> got = ReadOnLoop();
  ASSERT_FALSE(got.ok());
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace phub::transport
