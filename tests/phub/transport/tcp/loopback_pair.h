// Test support for TcpConnection: a fixture that connects two TcpConnections over 127.0.0.1 in
// one process (the server side accepted by a SocketListener on one EventLoop, the client side
// made by ConnectWithRetry on another), or a raw socket to play a misbehaving peer. The
// handler and send collector are transport-neutral (../recording_handler.h). Every wait has a
// generous timeout that only keeps a broken build from hanging; nothing here measures time.
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
#include "tests/phub/transport/recording_handler.h"

namespace phub::transport::tcp {

inline constexpr int kConnectTimeoutMs = 10000;

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
