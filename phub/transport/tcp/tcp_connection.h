// Connection over one TCP stream (Boost.Asio). Receives read the 32-byte header, ask the
// handler for the destination, then read the payload straight into it: no staging buffer.
// Sends are gathered writes (writev) of header + caller's payload, several queued messages per
// syscall. Lives on the thread of the io_context its socket belongs to.
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <memory>
#include <optional>

#include "phub/transport/connection.h"
#include "phub/transport/finishing.h"

namespace phub::transport::tcp {

class TcpConnection final : public Connection,
                            public std::enable_shared_from_this<TcpConnection> {
 public:
  // `handler` must outlive the connection's OnClosed callback.
  static std::shared_ptr<TcpConnection> Create(boost::asio::ip::tcp::socket socket,
                                               ConnectionHandler* handler);

  void Start() override;
  void Send(const WireHeader& header, std::span<const std::byte> payload,
            SendDone done) override;
  void Close(const Status& why) override;
  // Half-closes (FIN behind the queued bytes) and reads the peer to its end: connection.h.
  void Finish(std::chrono::milliseconds limit, FinishDone done) override;
  bool closed() const override { return closed_; }
  std::string peer() const override { return peer_; }
  int receive_cpu() const override;

  // Bytes moved so far (payload and headers), for stats.
  std::uint64_t bytes_sent() const { return bytes_sent_; }
  std::uint64_t bytes_received() const { return bytes_received_; }

 private:
  struct PendingSend {
    EncodedHeader header;
    std::span<const std::byte> payload;
    SendDone done;
  };

  TcpConnection(boost::asio::ip::tcp::socket socket, ConnectionHandler* handler);
  void ReadHeader();
  void OnHeader(const boost::system::error_code& ec);
  void OnPayload(const boost::system::error_code& ec);
  void WriteQueued();
  void OnWritten(const boost::system::error_code& ec, std::size_t batch);
  void FailIo(const char* what, const boost::system::error_code& ec);
  // Finish, once nothing is queued: the write side ends, reads switch to dropping.
  void EndWriting();
  bool Draining() const;
  // Reads the peer's bytes into the drain buffer until its end; the connection's only read.
  void Drain();
  // Closes a Finish, telling its caller `how` it ended.
  void EndFinish(const Status& how);


  boost::asio::ip::tcp::socket socket_;
  ConnectionHandler* handler_;
  std::string peer_;
  EncodedHeader header_bytes_{};
  WireHeader header_;
  std::deque<PendingSend> queue_;
  bool writing_ = false;
  bool reading_ = false;  // a read is outstanding (at most one ever is)
  bool started_ = false;
  bool closed_ = false;
  std::unique_ptr<Finishing> finishing_;  // a Finish under way
  // What a Finish reads the peer's last bytes into (not the handler's slots: its caller may
  // free them once it is done).
  std::unique_ptr<std::byte[]> drain_;
  std::uint64_t bytes_sent_ = 0;
  std::uint64_t bytes_received_ = 0;
};

}  // namespace phub::transport::tcp
