#include "phub/transport/socket_options.h"

#include <gtest/gtest.h>

#include <sys/socket.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace phub::transport {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;

::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

TEST(ConnectWithRetryTest, GivesUpWithUnavailableNamingTheAddress) {
  // A port that was free a moment ago: bind one, note it, release it.
  asio::io_context context;
  std::uint16_t port = 0;
  {
    tcp::acceptor probe(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port = probe.local_endpoint().port();
  }
  StatusOr<tcp::socket> socket = ConnectWithRetry(context, "127.0.0.1", port, 50);
  ASSERT_FALSE(socket.ok());
  EXPECT_EQ(socket.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(socket.status(), "127.0.0.1:" + std::to_string(port)));
}

// A listener whose accept queue is full drops further SYNs: a blocking connect(2) would wait
// for the kernel's SYN retries (about 2 minutes), as it does when nothing answers at all (a cut
// link). Each ConnectWithRetry must still end within its timeout.
TEST(ConnectWithRetryTest, AConnectNothingAnswersEndsWithinTheTimeout) {
  asio::io_context context;
  tcp::acceptor full(context);
  full.open(tcp::v4());
  full.bind(tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  full.listen(0);  // never accepted: the queue fills after a connection or two
  const std::uint16_t port = full.local_endpoint().port();
  constexpr int kTimeoutMs = 300;
  std::vector<tcp::socket> held;
  bool refused = false;
  for (int i = 0; i < 8 && !refused; ++i) {
    const auto start = std::chrono::steady_clock::now();
    StatusOr<tcp::socket> socket = ConnectWithRetry(context, "127.0.0.1", port, kTimeoutMs);
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - start);
    // Generous slack for a loaded machine; before the fix, ~2 minutes.
    EXPECT_LT(took.count(), kTimeoutMs + 2000) << "attempt " << i;
    if (socket.ok()) {
      held.push_back(*std::move(socket));
      continue;
    }
    refused = true;
    EXPECT_EQ(socket.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_TRUE(MessageHas(socket.status(), "127.0.0.1:" + std::to_string(port)));
    EXPECT_TRUE(MessageHas(socket.status(), "gave up after 300 ms"));
  }
  EXPECT_TRUE(refused) << "the accept queue never filled";
}

TEST(ConnectWithRetryTest, ConnectedSocketHasNoDelay) {
  asio::io_context context;
  tcp::acceptor acceptor(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  StatusOr<tcp::socket> socket =
      ConnectWithRetry(context, "127.0.0.1", acceptor.local_endpoint().port(), 10000);
  ASSERT_TRUE(socket.ok()) << socket.status();
  tcp::no_delay no_delay;
  socket->get_option(no_delay);
  EXPECT_TRUE(no_delay.value());
}

TEST(ConnectWithRetryTest, DialsFromTheLocalAddressGiven) {
  asio::io_context context;
  tcp::acceptor acceptor(context, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
  StatusOr<tcp::socket> socket = ConnectWithRetry(
      context, "127.0.0.1", acceptor.local_endpoint().port(), 10000, {}, "127.0.0.7");
  ASSERT_TRUE(socket.ok()) << socket.status();
  EXPECT_EQ(socket->local_endpoint().address().to_string(), "127.0.0.7");
  tcp::socket accepted = acceptor.accept();
  EXPECT_EQ(accepted.remote_endpoint().address().to_string(), "127.0.0.7");

  StatusOr<tcp::socket> refused = ConnectWithRetry(
      context, "127.0.0.1", acceptor.local_endpoint().port(), 100, {}, "192.0.2.254");
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(MessageHas(refused.status(), "cannot send from 192.0.2.254"));
  EXPECT_FALSE(ConnectWithRetry(context, "127.0.0.1", 1, 100, {}, "not-an-ip").ok());
}

TEST(TuneSocketTest, BusyPollIsSetOrRefusedSayingWhatItNeeds) {
  asio::io_context context;
  tcp::socket socket(context);
  socket.open(tcp::v4());
  const Status status = TuneSocket(socket, SocketTuning{.busy_poll_us = 50});
  if (!status.ok()) {
    // Unprivileged, above net.core.busy_read.
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied);
    EXPECT_TRUE(MessageHas(status, "CAP_NET_ADMIN"));
    return;
  }
  int us = 0;
  socklen_t length = sizeof(us);
  ASSERT_EQ(::getsockopt(socket.native_handle(), SOL_SOCKET, SO_BUSY_POLL, &us, &length), 0);
  EXPECT_EQ(us, 50);
}

TEST(TuneSocketTest, LeavesNagleOnWhenAskedTo) {
  asio::io_context context;
  tcp::socket socket(context);
  socket.open(tcp::v4());
  ASSERT_TRUE(TuneSocket(socket, SocketTuning{.no_delay = false}).ok());
  tcp::no_delay no_delay;
  socket.get_option(no_delay);
  EXPECT_FALSE(no_delay.value());
}

TEST(TuneSocketTest, SetsBufferSizesWhenAsked) {
  asio::io_context context;
  tcp::socket socket(context);
  socket.open(tcp::v4());
  ASSERT_TRUE(TuneSocket(socket, SocketTuning{.no_delay = true, .buffer_bytes = 1 << 20}).ok());
  asio::socket_base::send_buffer_size send;
  asio::socket_base::receive_buffer_size receive;
  socket.get_option(send);
  socket.get_option(receive);
  // Linux reports twice the requested size (bookkeeping overhead); never less.
  EXPECT_GE(send.value(), 1 << 20);
  EXPECT_GE(receive.value(), 1 << 20);
  tcp::no_delay no_delay;
  socket.get_option(no_delay);
  EXPECT_TRUE(no_delay.value());
}

}  // namespace
}  // namespace phub::transport
