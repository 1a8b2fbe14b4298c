// The server of the TCP rendezvous (tcp_store.h): a key-value store for one job, hosted by
// rank 0 on its own event-loop thread. Ranks connect, say Hello (rank, world size, job id),
// publish and look keys up, and say Done; once every rank has said Done, or `lifetime_ms`
// after Start, the server stops and closes every connection.
//
// Every byte it reads is hostile (frame.h bounds each frame): at most world_size +
// extra_connections connections at once (more are told to retry and closed); a connection
// that has not said Hello within hello_timeout_ms, that leaves a frame unfinished, or that does
// not take a reply, for frame_timeout_ms, is closed; at most one request per connection is
// served at a time (no reply queue to grow); at most max_entries keys. A Hello with another
// world size or job id, a rank out of range or already connected is refused with an Error
// that says so. Nothing a peer sends ends the process.
//
// Thread-safety: the public methods may be called from any thread; everything else runs on
// the server's loop.
#pragma once

#include <boost/asio/steady_timer.hpp>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "phub/common/status.h"
#include "phub/transport/event_loop.h"
#include "phub/transport/socket_listener.h"

namespace phub::rendezvous {

struct TcpStoreServerOptions {
  std::string bind_host = "0.0.0.0";  // an IP address
  std::uint16_t port = 0;             // 0: the kernel picks one (port() tells which)
  std::uint32_t world_size = 1;
  std::string job;          // the job id every Hello must carry (may be empty)
  int lifetime_ms = 30000;  // the server stops this long after Start at the latest
  int hello_timeout_ms = 10000;
  int frame_timeout_ms = 10000;
  std::uint32_t extra_connections = 8;  // over world_size: late, reconnecting or stray clients
  std::size_t max_entries = 1024;       // with kMaxValueBytes each: at most ~4 MiB of values
};

class TcpStoreServer {
 public:
  // Binds and starts serving. InvalidArgument for a bad option or bind_host; Unavailable when
  // the port cannot be bound (taken by another job?).
  static StatusOr<std::unique_ptr<TcpStoreServer>> Start(const TcpStoreServerOptions& options);
  // Stops at once (connections closed, waiting clients see Unavailable).
  ~TcpStoreServer();

  std::uint16_t port() const { return port_; }

  // Blocks until the server has stopped. OK when every rank said Done; DeadlineExceeded naming
  // the ranks that did not when the lifetime ran out.
  Status WaitStopped();
  bool stopped() const;

  // Connections open now (the loop's count), for tests.
  std::size_t TEST_connections();

 private:
  class Connection;  // one accepted socket (tcp_store_server.cc); a member, so it may use ours

  explicit TcpStoreServer(const TcpStoreServerOptions& options);
  void OnAccept(boost::asio::ip::tcp::socket socket);
  void Stop(Status why);  // on the loop

  // Called by Connection, on the loop.
  std::string HelloRefusal(std::uint32_t rank, std::uint32_t world_size, const std::string& job,
                           const Connection* from) const;
  void Left(Connection* connection);
  void Published(const std::string& key);
  void RankDone(std::uint32_t rank);
  void DoneAcknowledged();
  void LogRefusal(const std::string& peer, const std::string& why);

  const TcpStoreServerOptions options_;
  transport::EventLoop loop_;  // first: destroyed last, after everything that uses its context
  std::unique_ptr<transport::SocketListener> listener_;
  std::unique_ptr<boost::asio::steady_timer> lifetime_;
  std::uint16_t port_ = 0;

  // The loop's state.
  std::set<std::shared_ptr<Connection>> connections_;
  std::vector<Connection*> rank_connection_;  // the connection each rank said Hello on
  std::vector<bool> done_;
  std::uint32_t done_count_ = 0;
  std::map<std::string, std::string> entries_;
  std::uint64_t refusals_logged_ = 0;

  mutable std::mutex mu_;
  std::condition_variable stopped_cv_;
  bool stopped_ = false;  // guarded by mu_
  Status stop_status_;    // guarded by mu_
};

}  // namespace phub::rendezvous
