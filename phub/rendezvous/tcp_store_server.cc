#include "phub/rendezvous/tcp_store_server.h"

#include <boost/asio/write.hpp>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "phub/rendezvous/frame.h"
#include "phub/rendezvous/tcp_store_connection.h"
#include "spdlog/spdlog.h"

namespace phub::rendezvous {

namespace asio = boost::asio;
using asio::ip::tcp;
using Clock = std::chrono::steady_clock;

TcpStoreServer::TcpStoreServer(const TcpStoreServerOptions& options)
    : options_(options),
      loop_("rendezvous", -1),
      rank_connection_(options.world_size, nullptr),
      done_(options.world_size, false) {}

StatusOr<std::unique_ptr<TcpStoreServer>> TcpStoreServer::Start(
    const TcpStoreServerOptions& options) {
  if (options.world_size == 0 || options.world_size > (1u << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("rendezvous server: world size ", options.world_size, " is not in 1..2^20"));
  }
  if (options.lifetime_ms <= 0 || options.hello_timeout_ms <= 0 || options.frame_timeout_ms <= 0) {
    return absl::InvalidArgumentError("rendezvous server: its timeouts must be > 0 ms");
  }
  std::unique_ptr<TcpStoreServer> server(new TcpStoreServer(options));
  Status status;
  TcpStoreServer* s = server.get();
  s->loop_.Run([&] {
    auto listener =
        transport::SocketListener::Bind(s->loop_.context(), options.bind_host, options.port);
    if (!listener.ok()) {
      status = Status(listener.status().code(),
                      absl::StrCat("rendezvous server: ", listener.status().message()));
      return;
    }
    s->listener_ = *std::move(listener);
    s->port_ = s->listener_->port();
    s->listener_->Start([s](tcp::socket socket) { s->OnAccept(std::move(socket)); });
    s->lifetime_ = std::make_unique<asio::steady_timer>(s->loop_.context());
    s->lifetime_->expires_after(std::chrono::milliseconds(options.lifetime_ms));
    s->lifetime_->async_wait([s](const boost::system::error_code& ec) {
      if (ec) return;
      std::string missing;
      int listed = 0;
      for (std::uint32_t r = 0; r < s->options_.world_size; ++r) {
        if (s->done_[r]) continue;
        if (++listed <= 16) absl::StrAppend(&missing, listed > 1 ? ", " : "", r);
      }
      if (listed > 16) absl::StrAppend(&missing, " and ", listed - 16, " more");
      s->Stop(absl::DeadlineExceededError(absl::StrCat(
          "the rendezvous server on port ", s->port_, " stopped after ", s->options_.lifetime_ms,
          " ms with ", s->done_count_, " of ", s->options_.world_size, " ranks done; not done: ",
          missing, ": are they running, with the same --rendezvous and --world?")));
    });
  });
  if (!status.ok()) {
    s->loop_.Run([s] { s->listener_.reset(); });
    return status;
  }
  return server;
}

TcpStoreServer::~TcpStoreServer() {
  loop_.Run([this] {
    Stop(absl::CancelledError("the rendezvous server was shut down"));
    listener_.reset();
    lifetime_.reset();
  });
}

void TcpStoreServer::OnAccept(tcp::socket socket) {
  const std::size_t limit = std::size_t{options_.world_size} + options_.extra_connections;
  if (connections_.size() >= limit) {
    // Told to come back, without a Connection (no read, no timer): a flood costs an accept and
    // a close each. The write does not block: a full socket buffer just loses the Error.
    const std::string why = absl::StrCat("the rendezvous server holds its limit of ", limit,
                                         " connections (world size ", options_.world_size, " + ",
                                         options_.extra_connections, "): retry later");
    Message error{.type = MessageType::kError, .retryable = true};
    error.text = why;
    boost::system::error_code ignored;
    socket.non_blocking(true, ignored);
    if (auto frame = EncodeFrame(error); frame.ok())
      socket.write_some(asio::buffer(*frame), ignored);
    LogRefusal(PeerOf(socket), why);
    socket.close(ignored);
    return;
  }
  auto connection = std::make_shared<Connection>(*this, std::move(socket));
  connections_.insert(connection);
  connection->Start();
}

std::string TcpStoreServer::HelloRefusal(std::uint32_t rank, std::uint32_t world_size,
                                         const std::string& job, const Connection* from) const {
  const std::string which_job =
      options_.job.empty() ? "no job id" : absl::StrCat("job id '", options_.job, "'");
  if (world_size != options_.world_size || job != options_.job) {
    return absl::StrCat(
        "this rendezvous serves a job of ", options_.world_size, " ranks with ", which_job,
        ", but rank ", rank, " says ", world_size, " ranks and ",
        job.empty() ? "no job id" : absl::StrCat("job id '", Printable(job), "'"),
        ": give every rank the same --world and --rendezvous, and each job its own port (or "
        "tcp://HOST:PORT/JOB)");
  }
  if (rank >= options_.world_size) {
    return absl::StrCat("rank ", rank, " is outside the world of ", options_.world_size, " ranks");
  }
  if (const Connection* other = rank_connection_[rank]; other != nullptr && other != from) {
    return absl::StrCat("rank ", rank, " is already connected (from ", other->peer(),
                        "): two processes were given the same rank");
  }
  return "";
}

void TcpStoreServer::Left(Connection* connection) {
  if (connection->joined() && rank_connection_[connection->rank()] == connection) {
    rank_connection_[connection->rank()] = nullptr;
  }
  connections_.erase(connection->shared_from_this());
}

void TcpStoreServer::Published(const std::string& key) {
  const auto it = entries_.find(key);
  if (it == entries_.end()) return;
  // A copy: an Offer that fails closes its connection, which leaves connections_.
  const std::vector<std::shared_ptr<Connection>> waiting(connections_.begin(), connections_.end());
  for (const auto& c : waiting) c->Offer(key, it->second);
}

void TcpStoreServer::RankDone(std::uint32_t rank) {
  if (!done_[rank]) {
    done_[rank] = true;
    ++done_count_;
  }
}

void TcpStoreServer::DoneAcknowledged() {
  if (done_count_ == options_.world_size) Stop(absl::OkStatus());
}

void TcpStoreServer::Stop(Status why) {
  {
    std::lock_guard lock(mu_);
    if (stopped_) return;
  }
  if (listener_) listener_->Stop();
  if (lifetime_) lifetime_->cancel();
  const std::set<std::shared_ptr<Connection>> open = std::move(connections_);
  connections_.clear();
  for (const auto& c : open) c->Close(why.ok() ? "every rank is done" : std::string(why.message()));
  if (!why.ok() && why.code() != absl::StatusCode::kCancelled) {
    spdlog::warn("{}", why.message());
  }
  {
    std::lock_guard lock(mu_);
    stopped_ = true;
    stop_status_ = std::move(why);
  }
  stopped_cv_.notify_all();
}

Status TcpStoreServer::WaitStopped() {
  std::unique_lock lock(mu_);
  // The lifetime timer stops the server; the margin only guards against a stuck loop.
  const auto bound = std::chrono::milliseconds(options_.lifetime_ms) + std::chrono::seconds(10);
  if (!stopped_cv_.wait_for(lock, bound, [&] { return stopped_; })) {
    return absl::InternalError("the rendezvous server did not stop after its lifetime");
  }
  return stop_status_;
}

bool TcpStoreServer::stopped() const {
  std::lock_guard lock(mu_);
  return stopped_;
}

std::size_t TcpStoreServer::TEST_connections() {
  std::size_t n = 0;
  loop_.Run([&] { n = connections_.size(); });
  return n;
}

void TcpStoreServer::LogRefusal(const std::string& peer, const std::string& why) {
  constexpr std::uint64_t kLogged = 20;
  if (refusals_logged_ < kLogged) {
    spdlog::warn("rendezvous server on port {}: refused {}: {}", port_, peer, why);
  } else if (refusals_logged_ == kLogged) {
    spdlog::warn("rendezvous server on port {}: further refusals are logged at debug level", port_);
  } else {
    spdlog::debug("rendezvous server on port {}: refused {}: {}", port_, peer, why);
  }
  ++refusals_logged_;
}

}  // namespace phub::rendezvous
