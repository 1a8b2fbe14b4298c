#include "phub/server/server_core.h"

#include "absl/strings/str_cat.h"
#include "phub/transport/tcp/tcp_connection.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using transport::tcp::TcpConnection;
using transport::tcp::TcpListener;

ServerCore::ServerCore(keys::CoreIndex index, int pin_core)
    : index_(index), loop_(absl::StrCat("core ", index), pin_core) {}

StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(keys::CoreIndex index,
                                                         const std::string& address,
                                                         std::uint16_t port, int pin_core,
                                                         const transport::tcp::SocketTuning& tcp) {
  std::unique_ptr<ServerCore> core(new ServerCore(index, pin_core));
  Status status;
  core->loop_.Run([&] {
    auto listener = TcpListener::Bind(core->loop_.context(), address, port, tcp);
    if (!listener.ok()) {
      status = listener.status();
      return;
    }
    core->listener_ = std::move(*listener);
    core->port_ = core->listener_->port();
    ServerCore* self = core.get();
    core->listener_->Start([self](boost::asio::ip::tcp::socket socket) {
      if (!self->shard_) {
        // Between jobs nobody may attach; the worker's handshake would have said so.
        spdlog::warn("core {}: refusing a data connection: no job is running", self->index_);
        return;  // the socket closes as it goes out of scope
      }
      auto connection = TcpConnection::Create(std::move(socket), self->shard_.get());
      self->shard_->Adopt(std::move(connection));
    });
  });
  if (!status.ok()) return status;
  return core;
}

ServerCore::~ServerCore() {
  loop_.Run([this] {
    shard_.reset();
    if (listener_) listener_->Stop();
    listener_.reset();
  });
}

void ServerCore::InstallShard(std::shared_ptr<const JobSpec> job, Shard::EventSink sink) {
  loop_.Run([&] { shard_ = std::make_unique<Shard>(std::move(job), index_, std::move(sink)); });
}

ShardStats ServerCore::RemoveShard() {
  ShardStats stats;
  loop_.Run([&] {
    if (!shard_) return;
    stats = shard_->stats();
    shard_->CloseAll(absl::OkStatus());
    shard_.reset();
  });
  return stats;
}

}  // namespace phub::server
