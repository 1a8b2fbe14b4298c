#include "phub/server/server_core.h"

#include <boost/asio/steady_timer.hpp>
#include <new>

#include "absl/strings/str_cat.h"
#include "phub/transport/tcp/tcp_connection.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using transport::tcp::TcpConnection;
using transport::tcp::TcpListener;
using transport::verbs::VerbsConnection;

namespace {
// A worker sends the shard only pushes and INIT (landing zones), ATTACH and BYE: staged
// messages are header-sized, so the staged ring stays small however many workers there are.
// The shard sends only its chunks' weights; the set-up, ATTACH included, has --attach-timeout-ms.
transport::verbs::VerbsLimits ShardLimits(std::uint64_t chunk_bytes, int attach_timeout_ms) {
  transport::verbs::VerbsLimits limits;
  limits.staged_payload_bytes = 1024;
  limits.send_buffers = 4;  // weights go out from registered memory, never by copy
  limits.max_send_payload_bytes = chunk_bytes;
  limits.setup_timeout_ms = attach_timeout_ms;
  return limits;
}
}  // namespace

ServerCore::ServerCore(keys::CoreIndex index, int pin_core)
    : index_(index), loop_(absl::StrCat("core ", index), pin_core) {}

StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(
    keys::CoreIndex index, const std::string& address, std::uint16_t port, int pin_core,
    const transport::tcp::SocketTuning& tcp,
    std::shared_ptr<const transport::verbs::VerbsDevice> rdma, const ServerLimits& limits) {
  std::unique_ptr<ServerCore> core(new ServerCore(index, pin_core));
  core->rdma_ = std::move(rdma);
  core->limits_ = limits;
  Status status;
  core->loop_.Run([&] {
    if (core->rdma_) {
      auto verbs = transport::verbs::OpenVerbsLoop(core->rdma_, core->loop_.context());
      if (!verbs.ok()) {
        status = verbs.status();
        return;
      }
      core->verbs_ = std::move(*verbs);
    }
    auto listener = TcpListener::Bind(core->loop_.context(), address, port, tcp);
    if (!listener.ok()) {
      status = listener.status();
      return;
    }
    core->listener_ = std::move(*listener);
    core->port_ = core->listener_->port();
    ServerCore* self = core.get();
    core->listener_->Start([self](boost::asio::ip::tcp::socket socket) {
      self->OnAccept(std::move(socket));
    });
  });
  if (!status.ok()) return status;
  return core;
}

void ServerCore::OnAccept(boost::asio::ip::tcp::socket socket) {
  if (!shard_) {
    // Between jobs nobody may attach; the worker's handshake would have said so.
    spdlog::warn("core {}: refusing a data connection: no job is running", index_);
    return;  // the socket closes as it goes out of scope
  }
  // Connections still in their verbs set-up have not attached either: they count too.
  std::erase_if(setting_up_, [](const auto& c) { return c.expired(); });
  const std::size_t unattached = shard_->unattached() + setting_up_.size();
  if (unattached >= limits_.max_connections) {
    // Closed at once, as the socket goes out of scope. Counted, not logged one by one.
    if (refused_++ % 1000 == 0) {
      spdlog::warn("core {}: refusing data connections: {} have not attached yet, the limit is "
                   "{} (--max-connections); {} refused so far",
                   index_, unattached, limits_.max_connections, refused_);
    }
    return;
  }
  if (!verbs_) {
    auto connection = TcpConnection::Create(std::move(socket), shard_.get());
    shard_->Adopt(connection);
    WatchAttach(connection);
    return;
  }
  // The set-up takes a round trip; the job may end meanwhile, so the shard is looked up again.
  const std::uint64_t generation = shard_generation_;
  auto current = [this, generation]() -> transport::ConnectionHandler* {
    return shard_generation_ == generation ? shard_.get() : nullptr;
  };
  setting_up_.push_back(VerbsConnection::Accept(
      std::move(socket), *verbs_, current,
      ShardLimits(job_chunk_bytes_, limits_.attach_timeout_ms),
      [this, current](StatusOr<std::shared_ptr<VerbsConnection>> c) {
        if (!c.ok()) {
          spdlog::warn("core {}: verbs connection set-up failed: {}", index_,
                       c.status().message());
          return;
        }
        if (current() == nullptr) return (*c)->Close(absl::CancelledError("job over"));
        shard_->Adopt(*std::move(c));
      }));
}

void ServerCore::WatchAttach(const std::shared_ptr<transport::Connection>& connection) {
  // On verbs the ATTACH travels in the set-up, under the same deadline (ShardLimits).
  auto timer = std::make_shared<boost::asio::steady_timer>(loop_.context());
  timer->expires_after(std::chrono::milliseconds(limits_.attach_timeout_ms));
  timer->async_wait([timer, weak = std::weak_ptr<transport::Connection>(connection),
                     timeout = limits_.attach_timeout_ms](const boost::system::error_code& ec) {
    if (ec) return;
    auto c = weak.lock();
    if (!c || c->closed() || c->tag() >= 0) return;
    c->Close(absl::DeadlineExceededError(absl::StrCat(
        "no ATTACH from ", c->peer(), " within ", timeout, " ms (--attach-timeout-ms)")));
  });
}

void ServerCore::CloseSettingUp() {
  auto setting_up = std::move(setting_up_);
  for (auto& weak : setting_up) {
    if (auto c = weak.lock()) c->Close(absl::CancelledError("the job ended during its set-up"));
  }
}

ServerCore::~ServerCore() {
  loop_.Run([this] {
    ++shard_generation_;
    CloseSettingUp();
    shard_.reset();
    if (listener_) listener_->Stop();
    listener_.reset();
    verbs_.reset();
  });
}

Status ServerCore::InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink) {
  Status status;
  loop_.Run([&] {
    ++shard_generation_;
    const std::uint64_t weight_bytes = job->table.bytes_on_core(index_);
    job_chunk_bytes_ = job->table.chunk_bytes();
    try {
      shard_ = std::make_unique<Shard>(std::move(job), index_, std::move(sink));
    } catch (const std::bad_alloc&) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "out of memory allocating the job's slots, weights and optimizer state (",
          weight_bytes, " bytes of weights on this core)"));
      return;
    }
    if (!verbs_) return;
    // A fresh registry per job: the previous job's regions go with its last connection.
    verbs_->registry = std::make_shared<transport::verbs::MemoryRegistry>(rdma_);
    for (std::span<std::byte> buffer : shard_->Buffers()) {
      status = verbs_->registry->Register(buffer);
      if (!status.ok()) return;
    }
    spdlog::debug("core {}: registered {} regions, {} bytes, with {}", index_,
                  verbs_->registry->regions(), verbs_->registry->registered_bytes(),
                  rdma_->name());
  });
  if (!status.ok()) {
    RemoveShard();
    return Status(status.code(), absl::StrCat("core ", index_, ": ", status.message()));
  }
  return absl::OkStatus();
}

ShardStats ServerCore::RemoveShard() {
  ShardStats stats;
  loop_.Run([&] {
    if (!shard_) return;
    ++shard_generation_;
    CloseSettingUp();
    stats = shard_->stats();
    shard_->CloseAll(absl::OkStatus());
    shard_.reset();
    if (verbs_) verbs_->registry.reset();  // the job's regions go with it
  });
  return stats;
}

}  // namespace phub::server
