#include "phub/rendezvous/tcp_store.h"

#include <algorithm>
#include <boost/asio/connect.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"

namespace phub::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;

namespace {
// A Lookup's reply may come this long after its own wait: the server's timer and the network.
constexpr std::chrono::milliseconds kReplyMargin{5000};

bool PeerWentAway(const boost::system::error_code& ec) {
  return ec == asio::error::eof || ec == asio::error::connection_reset ||
         ec == asio::error::broken_pipe || ec == asio::error::connection_aborted;
}
}  // namespace

TcpStore::TcpStore(const TcpAddress& address, std::uint32_t rank, std::uint32_t world_size,
                   int timeout_ms)
    : tcp_(address),
      rank_(rank),
      world_size_(world_size),
      timeout_ms_(timeout_ms),
      address_text_(address.ToString()),
      socket_(io_) {}

TcpStore::~TcpStore() {
  boost::system::error_code ignored;
  socket_.close(ignored);
}

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Open(const TcpAddress& address, std::uint32_t rank,
                                                   std::uint32_t world_size, int timeout_ms) {
  if (rank != 0) return Connect(address, rank, world_size, timeout_ms);
  if (timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous timeout ", timeout_ms, " ms: must be > 0"));
  }
  TcpStoreServerOptions options;
  boost::system::error_code ec;
  asio::ip::make_address(address.host, ec);
  options.bind_host = ec ? "0.0.0.0" : address.host;
  options.port = address.port;
  options.world_size = world_size;
  options.job = address.job;
  // Longer than rank 0's own waits, which begin now and last timeout_ms: a lookup that finds
  // nothing gets its NotFound (naming the key) before the server goes.
  options.lifetime_ms = timeout_ms + std::min(timeout_ms, 10000);
  auto server = TcpStoreServer::Start(options);
  if (!server.ok()) {
    return Status(
        server.status().code(),
        absl::StrCat("rank 0 cannot serve the rendezvous ", address.ToString(), ": ",
                     server.status().message(), " (HOST must be an address of rank 0's own node)"));
  }
  std::unique_ptr<TcpStore> store(new TcpStore(address, rank, world_size, timeout_ms));
  store->server_ = *std::move(server);
  PHUB_RETURN_IF_ERROR(store->ConnectAndHello());
  return store;
}

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Connect(const TcpAddress& address, std::uint32_t rank,
                                                      std::uint32_t world_size, int timeout_ms) {
  if (timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous timeout ", timeout_ms, " ms: must be > 0"));
  }
  std::unique_ptr<TcpStore> store(new TcpStore(address, rank, world_size, timeout_ms));
  PHUB_RETURN_IF_ERROR(store->ConnectAndHello());
  return store;
}

std::string TcpStore::Where() const {
  return absl::StrCat("rendezvous ", address_text_, " (rank ", rank_, " of ", world_size_, ")");
}

bool TcpStore::RunUntil(const bool& done, Clock::time_point deadline) {
  io_.restart();
  while (!done) {
    if (io_.run_one_until(deadline) == 0 && !done) {
      boost::system::error_code ignored;
      socket_.close(ignored);  // aborts the operation; its handler runs below
      io_.restart();
      io_.run();
      return false;
    }
  }
  return true;
}

Status TcpStore::ConnectAndHello() {
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms_);
  auto backoff = std::chrono::milliseconds(20);
  while (true) {
    bool retry = false;
    Status status = TryHello(deadline, retry);
    if (status.ok() || !retry) return status;
    if (Clock::now() + backoff >= deadline) {
      return absl::UnavailableError(absl::StrCat(
          Where(), ": cannot reach rank 0's rendezvous server within ", timeout_ms_,
          " ms (last: ", status.message(),
          "): is rank 0 running, with the same --rendezvous, and is HOST the address of its "
          "node?"));
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(500));
  }
}

Status TcpStore::TryHello(Clock::time_point deadline, bool& retry) {
  boost::system::error_code ec;
  socket_.close(ec);
  broken_ = absl::OkStatus();
  tcp::resolver resolver(io_);
  const auto endpoints = resolver.resolve(tcp_.host, std::to_string(tcp_.port), ec);
  if (ec) {
    return absl::InvalidArgumentError(absl::StrCat(Where(), ": cannot resolve '", tcp_.host,
                                                   "': ", ec.message(), "; check the host name"));
  }
  bool done = false;
  asio::async_connect(socket_, endpoints,
                      [&](const boost::system::error_code& e, const tcp::endpoint&) {
                        ec = e;
                        done = true;
                      });
  if (!RunUntil(done, deadline)) {
    retry = true;
    return absl::DeadlineExceededError("connecting timed out");
  }
  if (ec) {
    retry = true;  // refused: rank 0 is not listening yet
    return absl::UnavailableError(absl::StrCat("connect: ", ec.message()));
  }
  socket_.set_option(tcp::no_delay(true), ec);

  Message hello{.type = MessageType::kHello};
  hello.rank = rank_;
  hello.world_size = world_size_;
  hello.job = tcp_.job;
  auto reply = Call(hello, deadline);
  if (!reply.ok()) {
    // Closed before a reply: the server was full (and the Error was lost) or is stopping.
    retry = reply.status().code() == absl::StatusCode::kUnavailable;
    return reply.status();
  }
  if (reply->type == MessageType::kWelcome) return absl::OkStatus();
  socket_.close(ec);
  if (reply->type == MessageType::kError) {
    retry = reply->retryable;
    if (retry) return absl::UnavailableError(Printable(reply->text, kMaxTextBytes));
    return absl::FailedPreconditionError(absl::StrCat(
        Where(), ": the server refused this rank: ", Printable(reply->text, kMaxTextBytes)));
  }
  return absl::FailedPreconditionError(
      absl::StrCat(Where(), ": answered ", MessageTypeName(reply->type),
                   " to Hello: is something other than a PHub rendezvous server on that port?"));
}

Status TcpStore::Broken(Status why) {
  broken_ = why;
  boost::system::error_code ignored;
  socket_.close(ignored);
  return why;
}

Status TcpStore::WriteFrame(const std::string& frame, Clock::time_point deadline) {
  bool done = false;
  boost::system::error_code ec;
  asio::async_write(socket_, asio::buffer(frame),
                    [&](const boost::system::error_code& e, std::size_t) {
                      ec = e;
                      done = true;
                    });
  if (!RunUntil(done, deadline)) {
    return absl::DeadlineExceededError(
        absl::StrCat(Where(), ": the server took no request within the deadline"));
  }
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat(Where(), ": sending to the server: ", ec.message(), ": has rank 0 exited?"));
  }
  return absl::OkStatus();
}

StatusOr<Message> TcpStore::ReadFrame(Clock::time_point deadline) {
  auto read = [&](void* data, std::size_t bytes) -> Status {
    bool done = false;
    boost::system::error_code ec;
    asio::async_read(socket_, asio::buffer(data, bytes),
                     [&](const boost::system::error_code& e, std::size_t) {
                       ec = e;
                       done = true;
                     });
    if (!RunUntil(done, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat(Where(), ": no answer from the server in time"));
    }
    if (PeerWentAway(ec)) {
      return absl::UnavailableError(
          absl::StrCat(Where(),
                       ": the server closed the connection: rank 0 exited, or its server stopped "
                       "(its timeout passed, or every rank was done); see rank 0's log"));
    }
    if (ec) return absl::UnavailableError(absl::StrCat(Where(), ": reading: ", ec.message()));
    return absl::OkStatus();
  };
  std::uint32_t length = 0;
  PHUB_RETURN_IF_ERROR(read(&length, kFramePrefixBytes));
  if (length > kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        Where(), ": the server sent a frame of ", length, " bytes (the limit is ", kMaxFrameBytes,
        "): is something other than a PHub rendezvous server on that port?"));
  }
  std::string body(length, '\0');
  PHUB_RETURN_IF_ERROR(read(body.data(), body.size()));
  auto message = DecodeBody(std::as_bytes(std::span(body)));
  if (!message.ok()) {
    return Status(message.status().code(), absl::StrCat(Where(), ": ", message.status().message()));
  }
  return message;
}

StatusOr<Message> TcpStore::Call(const Message& request, Clock::time_point deadline) {
  PHUB_ASSIGN_OR_RETURN(const std::string frame, EncodeFrame(request));  // bad key or value
  if (!broken_.ok()) return broken_;
  if (finished_) {
    return absl::FailedPreconditionError(absl::StrCat(Where(), ": used after Finish"));
  }
  if (Status s = WriteFrame(frame, deadline); !s.ok()) return Broken(s);
  auto reply = ReadFrame(deadline);
  if (!reply.ok()) return Broken(reply.status());
  if (reply->type == MessageType::kError) {
    // The server closes after an Error: this client is done either way.
    (void)Broken(absl::FailedPreconditionError(
        absl::StrCat(Where(), ": the server refused ", MessageTypeName(request.type), ": ",
                     Printable(reply->text, kMaxTextBytes))));
    if (request.type == MessageType::kHello) return reply;  // TryHello reads the retry flag
    return broken_;
  }
  return reply;
}

Status TcpStore::Publish(const std::string& key, const std::string& value) {
  Message request{.type = MessageType::kPublish};
  request.key = key;
  request.value = value;
  PHUB_ASSIGN_OR_RETURN(const Message reply,
                        Call(request, Clock::now() + std::chrono::milliseconds(timeout_ms_)));
  if (reply.type != MessageType::kOk) {
    return Broken(absl::FailedPreconditionError(absl::StrCat(Where(), ": the server answered ",
                                                             MessageTypeName(reply.type),
                                                             " to Publish('", key, "')")));
  }
  return absl::OkStatus();
}

StatusOr<std::string> TcpStore::Lookup(const std::string& key, int timeout_ms) {
  Message request{.type = MessageType::kLookup};
  request.key = key;
  request.wait_ms = static_cast<std::uint32_t>(std::max(timeout_ms, 0));
  PHUB_ASSIGN_OR_RETURN(
      const Message reply,
      Call(request, Clock::now() + std::chrono::milliseconds(request.wait_ms) + kReplyMargin));
  if (reply.type == MessageType::kValue) return reply.value;
  if (reply.type == MessageType::kNotFound) {
    return absl::DeadlineExceededError(
        absl::StrCat("'", key, "' was not published at the rendezvous ", address_text_, " within ",
                     timeout_ms, " ms (rank ", rank_,
                     " waited for it): is the rank that publishes it "
                     "running, with the same --rendezvous?"));
  }
  return Broken(absl::FailedPreconditionError(absl::StrCat(
      Where(), ": the server answered ", MessageTypeName(reply.type), " to Lookup('", key, "')")));
}

Status TcpStore::Remove(const std::string& key) {
  Message request{.type = MessageType::kRemove};
  request.key = key;
  PHUB_ASSIGN_OR_RETURN(const Message reply,
                        Call(request, Clock::now() + std::chrono::milliseconds(timeout_ms_)));
  if (reply.type != MessageType::kOk) {
    return Broken(absl::FailedPreconditionError(absl::StrCat(
        Where(), ": the server answered ", MessageTypeName(reply.type), " to Remove")));
  }
  return absl::OkStatus();
}

Status TcpStore::Finish() {
  if (finished_) return absl::OkStatus();
  StatusOr<Message> reply = Call(Message{.type = MessageType::kDone},
                                 Clock::now() + std::chrono::milliseconds(timeout_ms_));
  finished_ = true;
  boost::system::error_code ignored;
  socket_.close(ignored);
  Status status = reply.status();
  if (status.ok() && reply->type != MessageType::kOk) {
    status = absl::FailedPreconditionError(
        absl::StrCat(Where(), ": the server answered ", MessageTypeName(reply->type), " to Done"));
  }
  if (server_ != nullptr) {
    // Rank 0 serves until every rank is done, or its lifetime passed.
    if (status.ok()) status = server_->WaitStopped();
    server_.reset();
  }
  return status;
}

}  // namespace phub::rendezvous
