// The rendezvous over TCP (address tcp://HOST:PORT[/JOB]): no shared filesystem needed. Rank 0
// hosts the store's server (tcp_store_server.h) on PORT; every rank, rank 0 included, connects
// to HOST:PORT, retrying until its timeout (rank 0 may start later), and says Hello with its
// rank, the world size and the job id, which the server checks (so two jobs given the same
// port do not mix). Frames and limits: frame.h.
//
// Rank 0 binds HOST when HOST is an IP address, and every interface (0.0.0.0) when it is a
// name: a node's own name often resolves to a loopback alias there (Debian's 127.0.1.1), which
// the other nodes could not reach.
//
// Every wait has a deadline: connecting (timeout_ms), each request's reply (timeout_ms, and a
// Lookup's own timeout plus a margin), and the server's life (rank 0's timeout_ms). A client
// whose connection fails or times out mid-request stays failed (Unavailable): the store is
// used once, at start-up; the caller fails its set-up and says why.
//
// Thread-safety: one thread at a time (a blocking client on its own io_context).
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "phub/rendezvous/address.h"
#include "phub/rendezvous/frame.h"
#include "phub/rendezvous/rendezvous.h"
#include "phub/rendezvous/tcp_store_server.h"

namespace phub::rendezvous {

class TcpStore final : public Store {
 public:
  // Rank 0 starts the server, then every rank connects. The server lives until every rank is
  // done, or timeout_ms + min(timeout_ms, 10 s): past rank 0's own waits, which start with it.
  static StatusOr<std::unique_ptr<TcpStore>> Open(const TcpAddress& address, std::uint32_t rank,
                                                  std::uint32_t world_size, int timeout_ms);
  // Only the client: the server is someone else's (tests start one with their own limits).
  static StatusOr<std::unique_ptr<TcpStore>> Connect(const TcpAddress& address, std::uint32_t rank,
                                                     std::uint32_t world_size, int timeout_ms);
  ~TcpStore() override;

  Status Publish(const std::string& key, const std::string& value) override;
  StatusOr<std::string> Lookup(const std::string& key, int timeout_ms) override;
  Status Remove(const std::string& key) override;
  Status Finish() override;
  const std::string& address() const override { return address_text_; }

 private:
  using Clock = std::chrono::steady_clock;
  TcpStore(const TcpAddress& address, std::uint32_t rank, std::uint32_t world_size, int timeout_ms);

  Status ConnectAndHello();
  // One attempt: connect, Hello, Welcome. `retry` is set when trying again may help.
  Status TryHello(Clock::time_point deadline, bool& retry);
  // Sends `request` and reads one reply, both before `deadline`. A failure breaks the client.
  StatusOr<Message> Call(const Message& request, Clock::time_point deadline);
  Status WriteFrame(const std::string& frame, Clock::time_point deadline);
  StatusOr<Message> ReadFrame(Clock::time_point deadline);
  // Runs the io_context until `done` or `deadline`; on the deadline closes the socket (which
  // aborts the operation) and returns false.
  bool RunUntil(const bool& done, Clock::time_point deadline);
  Status Broken(Status why);
  std::string Where() const;

  const TcpAddress tcp_;
  const std::uint32_t rank_;
  const std::uint32_t world_size_;
  const int timeout_ms_;
  const std::string address_text_;
  boost::asio::io_context io_;
  boost::asio::ip::tcp::socket socket_;
  Status broken_;  // sticky: set once a request failed half-way
  bool finished_ = false;
  std::unique_ptr<TcpStoreServer> server_;  // rank 0's (Open); declared last: stops first
};

}  // namespace phub::rendezvous
