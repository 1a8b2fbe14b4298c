#include "phub/server/server_core.h"

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
transport::verbs::VerbsLimits ShardLimits() {
  transport::verbs::VerbsLimits limits;
  limits.staged_payload_bytes = 1024;
  limits.send_buffers = 4;  // weights go out from registered memory, never by copy
  return limits;
}
}  // namespace

ServerCore::ServerCore(keys::CoreIndex index, int pin_core)
    : index_(index), loop_(absl::StrCat("core ", index), pin_core) {}

StatusOr<std::unique_ptr<ServerCore>> ServerCore::Create(
    keys::CoreIndex index, const std::string& address, std::uint16_t port, int pin_core,
    const transport::tcp::SocketTuning& tcp,
    std::shared_ptr<const transport::verbs::VerbsDevice> rdma) {
  std::unique_ptr<ServerCore> core(new ServerCore(index, pin_core));
  core->rdma_ = std::move(rdma);
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
  if (!verbs_) {
    shard_->Adopt(TcpConnection::Create(std::move(socket), shard_.get()));
    return;
  }
  // The set-up takes a round trip; the job may end meanwhile, so the shard is looked up again.
  const std::uint64_t generation = shard_generation_;
  auto current = [this, generation]() -> transport::ConnectionHandler* {
    return shard_generation_ == generation ? shard_.get() : nullptr;
  };
  std::erase_if(setting_up_, [](const auto& c) { return c.expired(); });
  setting_up_.push_back(VerbsConnection::Accept(
      std::move(socket), *verbs_, current, ShardLimits(),
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
    shard_ = std::make_unique<Shard>(std::move(job), index_, std::move(sink));
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
