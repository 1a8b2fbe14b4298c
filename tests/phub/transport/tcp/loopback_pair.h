// Test support for TcpConnection: a recording ConnectionHandler, a collector of SendDone
// results, and a fixture that connects two TcpConnections over 127.0.0.1 in one process (the
// server side accepted by a SocketListener on one EventLoop, the client side made by
// ConnectWithRetry on another). Every wait has a generous timeout that only keeps a broken
// build from hanging; nothing here measures time.
#pragma once

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "phub/transport/connection.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/socket_options.h"
#include "phub/transport/tcp/tcp_connection.h"
#include "phub/transport/socket_listener.h"

namespace phub::transport::tcp {

// Only to turn a hang into a failure.
inline constexpr auto kTimeout = std::chrono::seconds(10);
inline constexpr int kConnectTimeoutMs = 10000;

inline ::testing::AssertionResult MessageHas(const Status& status, const std::string& part) {
  if (std::string(status.message()).find(part) != std::string::npos) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "message \"" << status.message() << "\" lacks \"" << part << "\"";
}

// Deterministic bytes that differ per message and per position.
inline std::vector<std::byte> Pattern(std::size_t size, std::uint32_t seed) {
  std::vector<std::byte> out(size);
  std::uint32_t x = seed * 2654435761u + 1;
  for (std::size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<std::byte>(x >> 24);
  }
  return out;
}

// A real ConnectionHandler that records what the connection tells it. By default each payload
// goes into a fresh buffer owned by the handler; a test may install its own resolver instead.
// Callbacks run on the connection's loop thread; the accessors are for the test thread.
class RecordingHandler final : public ConnectionHandler {
 public:
  struct Message {
    WireHeader header;
    std::span<std::byte> slot;  // where the payload landed; empty for payload_bytes == 0
  };
  using Resolver = std::function<StatusOr<std::span<std::byte>>(const WireHeader&)>;

  // Set before the connection starts.
  void set_resolver(Resolver resolver) { resolver_ = std::move(resolver); }
  void set_on_received_status(Status status) { on_received_status_ = std::move(status); }

  StatusOr<std::span<std::byte>> ResolveSlot(Connection&, const WireHeader& header) override {
    std::lock_guard lock(mu_);
    ++resolve_calls_;
    if (resolver_) {
      StatusOr<std::span<std::byte>> slot = resolver_(header);
      if (slot.ok()) pending_slot_ = *slot;
      return slot;
    }
    owned_.push_back(std::make_unique<std::vector<std::byte>>(header.payload_bytes));
    pending_slot_ = std::span<std::byte>(*owned_.back());
    return pending_slot_;
  }

  Status OnReceived(Connection&, const WireHeader& header) override {
    std::lock_guard lock(mu_);
    messages_.push_back(
        Message{header, header.payload_bytes > 0 ? pending_slot_ : std::span<std::byte>()});
    pending_slot_ = {};
    cv_.notify_all();
    return on_received_status_;
  }

  void OnClosed(Connection& connection, const Status& why) override {
    std::lock_guard lock(mu_);
    ++closed_count_;
    why_ = why;
    closed_flag_seen_ = connection.closed();
    cv_.notify_all();
  }

  bool WaitForMessages(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kTimeout, [&] { return messages_.size() >= n; });
  }
  bool WaitForClosed() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kTimeout, [&] { return closed_count_ > 0; });
  }

  std::vector<Message> messages() const {
    std::lock_guard lock(mu_);
    return messages_;
  }
  int resolve_calls() const {
    std::lock_guard lock(mu_);
    return resolve_calls_;
  }
  int closed_count() const {
    std::lock_guard lock(mu_);
    return closed_count_;
  }
  Status why() const {
    std::lock_guard lock(mu_);
    return why_;
  }
  bool closed_flag_seen() const {
    std::lock_guard lock(mu_);
    return closed_flag_seen_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Resolver resolver_;
  Status on_received_status_;
  std::deque<std::unique_ptr<std::vector<std::byte>>> owned_;
  std::span<std::byte> pending_slot_;
  std::vector<Message> messages_;
  int resolve_calls_ = 0;
  int closed_count_ = 0;
  Status why_;
  bool closed_flag_seen_ = false;
};

// Collects the statuses SendDone callbacks report, from any thread.
class SendResults {
 public:
  Connection::SendDone Callback() {
    return [this](const Status& status) {
      std::lock_guard lock(mu_);
      statuses_.push_back(status);
      cv_.notify_all();
    };
  }
  bool WaitFor(std::size_t n) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kTimeout, [&] { return statuses_.size() >= n; });
  }
  std::vector<Status> statuses() const {
    std::lock_guard lock(mu_);
    return statuses_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Status> statuses_;
};

class LoopbackPairTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_loop_.Run([&] {
      StatusOr<std::unique_ptr<SocketListener>> listener =
          SocketListener::Bind(server_loop_.context(), "127.0.0.1", 0);
      ASSERT_TRUE(listener.ok()) << listener.status();
      listener_ = *std::move(listener);
      listener_->Start([this](boost::asio::ip::tcp::socket socket) {
        std::lock_guard lock(accept_mu_);
        accepted_.push_back(std::move(socket));
        accept_cv_.notify_all();
      });
    });
    ASSERT_NE(listener_, nullptr);
    ASSERT_NE(listener_->port(), 0);
  }

  void TearDown() override {
    client_loop_.Run([&] {
      if (client_) client_->Close(absl::OkStatus());
      client_.reset();
    });
    server_loop_.Run([&] {
      if (server_) server_->Close(absl::OkStatus());
      server_.reset();
      if (listener_) listener_->Stop();
    });
    server_loop_.Run([&] { listener_.reset(); });
  }

  // The next socket the listener accepted.
  std::optional<boost::asio::ip::tcp::socket> WaitAccepted() {
    std::unique_lock lock(accept_mu_);
    if (!accept_cv_.wait_for(lock, kTimeout, [&] { return !accepted_.empty(); })) {
      return std::nullopt;
    }
    boost::asio::ip::tcp::socket socket = std::move(accepted_.front());
    accepted_.pop_front();
    return socket;
  }

  // Wraps the accepted side of a connection in server_ (handled by server_handler_) and starts it.
  void StartServerSide() {
    std::optional<boost::asio::ip::tcp::socket> socket = WaitAccepted();
    ASSERT_TRUE(socket.has_value()) << "nothing accepted within the timeout";
    server_loop_.Run([&] {
      server_ = TcpConnection::Create(std::move(*socket), &server_handler_);
      server_->Start();
    });
  }

  // client_ <-> server_ over loopback, both started.
  void ConnectPair() {
    StatusOr<boost::asio::ip::tcp::socket> socket =
        ConnectWithRetry(client_loop_.context(), "127.0.0.1", listener_->port(), kConnectTimeoutMs);
    ASSERT_TRUE(socket.ok()) << socket.status();
    ASSERT_NO_FATAL_FAILURE(StartServerSide());
    client_loop_.Run([&] {
      client_ = TcpConnection::Create(*std::move(socket), &client_handler_);
      client_->Start();
    });
  }

  // A plain blocking socket to the listener, for playing a misbehaving peer.
  std::optional<boost::asio::ip::tcp::socket> ConnectRaw() {
    StatusOr<boost::asio::ip::tcp::socket> socket =
        ConnectWithRetry(raw_context_, "127.0.0.1", listener_->port(), kConnectTimeoutMs);
    EXPECT_TRUE(socket.ok()) << socket.status();
    if (!socket.ok()) return std::nullopt;
    return *std::move(socket);
  }

  // Lets every completion already queued on both loops run (e.g. the aborted reads a Close
  // leaves behind), so a late callback would be seen by the assertions that follow.
  void DrainLoops() {
    for (int i = 0; i < 3; ++i) {
      client_loop_.Run([] {});
      server_loop_.Run([] {});
    }
  }

  void ClientSend(const WireHeader& header, std::span<const std::byte> payload,
                  Connection::SendDone done) {
    client_loop_.Run([&] { client_->Send(header, payload, std::move(done)); });
  }

  // Declared before the loops so they outlive every callback the loops might still run.
  RecordingHandler server_handler_;
  RecordingHandler client_handler_;
  boost::asio::io_context raw_context_;
  EventLoop server_loop_{"test-server", -1};
  EventLoop client_loop_{"test-client", -1};
  std::unique_ptr<SocketListener> listener_;  // used on server_loop_ only
  std::shared_ptr<TcpConnection> server_;  // used on server_loop_ only
  std::shared_ptr<TcpConnection> client_;  // used on client_loop_ only

  std::mutex accept_mu_;
  std::condition_variable accept_cv_;
  std::deque<boost::asio::ip::tcp::socket> accepted_;
};

}  // namespace phub::transport::tcp
