#include "phub/transport/socket_listener.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

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

TEST(SocketListenerTest, RejectsAnAddressThatIsNotAnIp) {
  asio::io_context context;
  StatusOr<std::unique_ptr<SocketListener>> listener = SocketListener::Bind(context, "not-an-ip", 0);
  ASSERT_FALSE(listener.ok());
  EXPECT_EQ(listener.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(MessageHas(listener.status(), "not-an-ip"));
}

TEST(SocketListenerTest, RefusesAPortInUseNamingIt) {
  asio::io_context context;
  StatusOr<std::unique_ptr<SocketListener>> first = SocketListener::Bind(context, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok()) << first.status();
  const std::uint16_t port = (*first)->port();
  StatusOr<std::unique_ptr<SocketListener>> second = SocketListener::Bind(context, "127.0.0.1", port);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(MessageHas(second.status(), "127.0.0.1:" + std::to_string(port)));
}

TEST(SocketListenerTest, HandsOverAcceptedSocketsWithNoDelay) {
  asio::io_context context;
  StatusOr<std::unique_ptr<SocketListener>> listener = SocketListener::Bind(context, "127.0.0.1", 0);
  ASSERT_TRUE(listener.ok()) << listener.status();
  std::optional<tcp::socket> accepted;
  (*listener)->Start([&](tcp::socket socket) { accepted.emplace(std::move(socket)); });
  tcp::socket client(context);
  client.connect(tcp::endpoint(asio::ip::make_address("127.0.0.1"), (*listener)->port()));
  // Runs the accept's completion on this thread, so the listener is used on its context's
  // thread as it requires.
  while (!accepted.has_value() && context.run_one() > 0) {
  }
  ASSERT_TRUE(accepted.has_value());
  EXPECT_EQ(accepted->remote_endpoint().port(), client.local_endpoint().port());
  tcp::no_delay no_delay;
  accepted->get_option(no_delay);
  EXPECT_TRUE(no_delay.value());
  (*listener)->Stop();
}

}  // namespace
}  // namespace phub::transport
