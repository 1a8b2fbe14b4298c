#include "phub/rendezvous/tcp_store_connection.h"

#include <boost/asio/write.hpp>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string PeerOf(const tcp::socket& socket) {
  boost::system::error_code ec;
  const auto endpoint = socket.remote_endpoint(ec);
  if (ec) return "(unknown peer)";
  return absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
}

TcpStoreServer::Connection::Connection(TcpStoreServer& server, tcp::socket socket)
    : server_(server),
      socket_(std::move(socket)),
      deadline_(socket_.get_executor()),
      lookup_timer_(socket_.get_executor()),
      peer_(PeerOf(socket_)) {}

void TcpStoreServer::Connection::Start() {
  hello_deadline_ = Clock::now() + std::chrono::milliseconds(server_.options_.hello_timeout_ms);
  Rearm();
  Read();
}

void TcpStoreServer::Connection::Close(const std::string& why) {
  if (closed_) return;
  closed_ = true;
  spdlog::debug("rendezvous server: closing {}{}: {}", peer_,
                joined_ ? absl::StrCat(" (rank ", rank_, ")") : "", why);
  deadline_.cancel();
  lookup_timer_.cancel();
  boost::system::error_code ignored;
  socket_.shutdown(tcp::socket::shutdown_both, ignored);
  socket_.close(ignored);
  server_.Left(this);
}

void TcpStoreServer::Connection::Offer(const std::string& key, const std::string& value) {
  if (closed_ || !parked_key_ || *parked_key_ != key) return;
  parked_key_.reset();
  lookup_timer_.cancel();
  Message reply{.type = MessageType::kValue};
  reply.value = value;
  Reply(reply);
}

void TcpStoreServer::Connection::Read() {
  if (reading_ || closed_) return;
  reading_ = true;
  socket_.async_read_some(asio::buffer(buffer_),
                          [self = shared_from_this()](const boost::system::error_code& ec,
                                                      std::size_t n) { self->OnRead(ec, n); });
}

void TcpStoreServer::Connection::OnRead(const boost::system::error_code& ec, std::size_t n) {
  reading_ = false;
  if (closed_) return;
  if (ec) {
    return Close(ec == asio::error::eof ? "the peer closed the connection" : ec.message());
  }
  const bool was_mid_frame = decoder_.mid_frame();
  if (Status s = decoder_.Feed(std::span<const std::byte>(buffer_.data(), n)); !s.ok()) {
    return Refuse(std::string(s.message()));
  }
  // Before each read no message waits in the decoder (Pump took them all), so a message now
  // means a frame ended in these bytes and what is left of them began a new one.
  if (decoder_.mid_frame() && (!was_mid_frame || decoder_.has_message())) {
    frame_started_ = Clock::now();
  }
  Pump();
}

void TcpStoreServer::Connection::Pump() {
  while (!closed_ && !writing_ && decoder_.has_message()) {
    if (parked_key_) {
      return Refuse(absl::StrCat("sent a request while its Lookup of '", *parked_key_,
                                 "' was waiting: one request at a time"));
    }
    Handle(*decoder_.Pop());
  }
  if (closed_) return;
  Rearm();
  // Reading on while a Lookup waits notices a client that went away.
  if (!writing_) Read();
}

void TcpStoreServer::Connection::Handle(const Message& m) {
  const TcpStoreServerOptions& options = server_.options_;
  if (state_ == State::kAwaitHello) {
    if (m.type != MessageType::kHello) {
      return Refuse(absl::StrCat("sent ", MessageTypeName(m.type), " before Hello"));
    }
    if (std::string why = server_.HelloRefusal(m.rank, m.world_size, m.job, this); !why.empty()) {
      return Refuse(why);
    }
    rank_ = m.rank;
    joined_ = true;
    state_ = State::kJoined;
    server_.rank_connection_[rank_] = this;
    return Reply(Message{.type = MessageType::kWelcome});
  }
  if (state_ == State::kDone) {
    return Refuse(absl::StrCat("sent ", MessageTypeName(m.type), " after Done"));
  }
  auto& entries = server_.entries_;
  switch (m.type) {
    case MessageType::kPublish: {
      if (entries.size() >= options.max_entries && !entries.contains(m.key)) {
        return Refuse(absl::StrCat("published '", m.key,
                                   "' to a rendezvous that holds its limit of ",
                                   options.max_entries, " keys"));
      }
      entries[m.key] = m.value;
      Reply(Message{.type = MessageType::kOk});
      return server_.Published(m.key);
    }
    case MessageType::kLookup: {
      if (auto it = entries.find(m.key); it != entries.end()) {
        Message reply{.type = MessageType::kValue};
        reply.value = it->second;
        return Reply(reply);
      }
      parked_key_ = m.key;
      // Answered by Offer, or NotFound after wait_ms (the server stops sooner, if it does).
      lookup_timer_.expires_after(std::chrono::milliseconds(m.wait_ms));
      lookup_timer_.async_wait([self = shared_from_this(), generation = ++lookup_generation_](
                                   const boost::system::error_code& ec) {
        if (ec || self->closed_ || generation != self->lookup_generation_ || !self->parked_key_) {
          return;
        }
        self->parked_key_.reset();
        self->Reply(Message{.type = MessageType::kNotFound});
      });
      return;
    }
    case MessageType::kRemove:
      entries.erase(m.key);
      return Reply(Message{.type = MessageType::kOk});
    case MessageType::kDone:
      state_ = State::kDone;
      server_.RankDone(rank_);
      done_after_write_ = true;
      return Reply(Message{.type = MessageType::kOk});
    case MessageType::kHello:
      return Refuse("said Hello twice");
    default:
      return Refuse(
          absl::StrCat("sent ", MessageTypeName(m.type), ", which only the server sends"));
  }
}

void TcpStoreServer::Connection::Reply(const Message& m) {
  auto frame = EncodeFrame(m);
  if (!frame.ok()) return Close(std::string(frame.status().message()));  // a bug: never sent
  out_ = *std::move(frame);
  writing_ = true;
  write_started_ = Clock::now();
  Rearm();
  asio::async_write(socket_, asio::buffer(out_),
                    [self = shared_from_this()](const boost::system::error_code& ec, std::size_t) {
                      self->OnWritten(ec);
                    });
}

void TcpStoreServer::Connection::OnWritten(const boost::system::error_code& ec) {
  writing_ = false;
  if (closed_) return;
  if (ec) return Close(absl::StrCat("writing a reply: ", ec.message()));
  if (close_after_write_) return Close(close_reason_);
  if (done_after_write_) {
    done_after_write_ = false;
    server_.DoneAcknowledged();  // may stop the server, closing this connection
    if (closed_) return;
  }
  Pump();
}

void TcpStoreServer::Connection::Refuse(const std::string& why) {
  server_.LogRefusal(peer_, why);
  if (writing_) return Close(why);
  close_after_write_ = true;
  close_reason_ = why;
  Message error{.type = MessageType::kError};
  error.text = why;
  Reply(error);
}

void TcpStoreServer::Connection::Rearm() {
  if (closed_) return;
  const auto frame_timeout = std::chrono::milliseconds(server_.options_.frame_timeout_ms);
  std::optional<Clock::time_point> want;
  if (state_ == State::kAwaitHello) want = hello_deadline_;
  if (decoder_.mid_frame())
    want = std::min(want.value_or(Clock::time_point::max()), frame_started_ + frame_timeout);
  if (writing_)
    want = std::min(want.value_or(Clock::time_point::max()), write_started_ + frame_timeout);
  if (want == armed_) return;
  armed_ = want;
  ++deadline_generation_;
  if (!want) {
    deadline_.cancel();
    return;
  }
  deadline_.expires_at(*want);
  deadline_.async_wait([self = shared_from_this(),
                        generation = deadline_generation_](const boost::system::error_code& ec) {
    if (ec || self->closed_ || generation != self->deadline_generation_) return;
    self->OnDeadline();
  });
}

void TcpStoreServer::Connection::OnDeadline() {
  const TcpStoreServerOptions& options = server_.options_;
  std::string why;
  if (writing_) {
    why = absl::StrCat("did not take its reply within ", options.frame_timeout_ms, " ms");
  } else if (state_ == State::kAwaitHello) {
    why = absl::StrCat("said no Hello within ", options.hello_timeout_ms, " ms");
  } else {
    why = absl::StrCat("left a frame unfinished for ", options.frame_timeout_ms, " ms");
  }
  server_.LogRefusal(peer_, why);
  Close(why);
}

}  // namespace phub::rendezvous
