// One connection of the TCP rendezvous server (tcp_store_server.h): its state machine, its
// deadlines and its replies. Internal to phub/rendezvous: included by the server and the
// connection's .cc only. A member class of TcpStoreServer, so it reads the server's state
// (entries, ranks, options) directly, always on the server's loop thread.
#pragma once

#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "phub/rendezvous/frame.h"
#include "phub/rendezvous/tcp_store_server.h"

namespace phub::rendezvous {

// "IP:PORT" of the socket's peer, for messages.
std::string PeerOf(const boost::asio::ip::tcp::socket& socket);

// One accepted socket: reads frames, serves one request at a time, and closes itself on a
// protocol error (after an Error saying why), on its deadlines, or when the server stops.
// Lives on the server's loop; its handlers hold a shared_ptr to it, the server a set entry.
class TcpStoreServer::Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(TcpStoreServer& server, boost::asio::ip::tcp::socket socket);

  // Arms the Hello deadline and starts reading.
  void Start();

  // Idempotent. `why` goes to the debug log.
  void Close(const std::string& why);

  // `key` was published: answers this connection's Lookup if it waits for it.
  void Offer(const std::string& key, const std::string& value);

  bool joined() const { return joined_; }
  std::uint32_t rank() const { return rank_; }
  const std::string& peer() const { return peer_; }

 private:
  enum class State { kAwaitHello, kJoined, kDone };

  void Read();
  void OnRead(const boost::system::error_code& ec, std::size_t n);

  // Serves the decoded requests one at a time: the next only once the reply to the last has
  // been written, so a client that sends requests without reading replies holds one reply.
  void Pump();

  void Handle(const Message& m);
  void Reply(const Message& m);
  void OnWritten(const boost::system::error_code& ec);

  // Sends an Error saying `why` and closes once it is written (or at the write deadline).
  void Refuse(const std::string& why);

  // The one deadline that applies now: the Hello's (from accept), a frame's (from its first
  // byte) or a reply's (from its first write); none while the connection idles between
  // requests or waits for a key (the server's lifetime bounds those).
  void Rearm();

  void OnDeadline();

  TcpStoreServer& server_;
  boost::asio::ip::tcp::socket socket_;
  boost::asio::steady_timer deadline_;
  boost::asio::steady_timer lookup_timer_;
  const std::string peer_;
  FrameDecoder decoder_;
  std::array<std::byte, 4096> buffer_;
  std::string out_;  // the reply being written
  State state_ = State::kAwaitHello;
  std::uint32_t rank_ = 0;
  bool joined_ = false;
  bool reading_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool close_after_write_ = false;
  bool done_after_write_ = false;
  std::string close_reason_;
  std::optional<std::string> parked_key_;  // the Lookup waiting for its key
  std::uint64_t lookup_generation_ = 0;
  std::chrono::steady_clock::time_point hello_deadline_, frame_started_, write_started_;
  std::optional<std::chrono::steady_clock::time_point> armed_;  // when deadline_ fires, if armed
  std::uint64_t deadline_generation_ = 0;
};

}  // namespace phub::rendezvous
