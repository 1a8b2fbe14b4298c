#include "phub/server/core/shard_router.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace phub::server {

using transport::Connection;
using transport::Op;
using transport::WireHeader;

ShardRouter::~ShardRouter() { CloseAll(absl::CancelledError("phubd is stopping")); }

void ShardRouter::Add(std::uint64_t session, std::unique_ptr<Shard> shard) {
  shards_[session] = std::move(shard);
}

std::unique_ptr<Shard> ShardRouter::Remove(std::uint64_t session, const Status& why) {
  auto it = shards_.find(session);
  if (it == shards_.end()) return nullptr;
  std::unique_ptr<Shard> shard = std::move(it->second);
  shards_.erase(it);
  // Closures reach the shard through routed_ (OnClosed) while it is still there.
  shard->CloseAll(why);
  std::erase_if(routed_, [&](const auto& entry) { return entry.second == shard.get(); });
  return shard;
}

Shard* ShardRouter::Find(std::uint64_t session) const {
  auto it = shards_.find(session);
  return it == shards_.end() ? nullptr : it->second.get();
}

std::vector<Shard*> ShardRouter::shards() const {
  std::vector<Shard*> all;
  for (const auto& [session, shard] : shards_) all.push_back(shard.get());
  return all;
}

void ShardRouter::Adopt(std::shared_ptr<Connection> connection) {
  unattached_.push_back(connection);
  connection->Start();
}

std::string AddressOf(const std::string& peer) {
  const auto colon = peer.rfind(':');
  return colon == std::string::npos ? peer : peer.substr(0, colon);
}

std::size_t ShardRouter::unattached_from(const std::string& address) const {
  return static_cast<std::size_t>(std::count_if(
      unattached_.begin(), unattached_.end(),
      [&](const auto& c) { return AddressOf(c->peer()) == address; }));
}

void ShardRouter::CloseOldestUnattached(const Status& why) {
  // Adopt appends: the front came first. Close() erases it (OnClosed).
  if (!unattached_.empty()) unattached_.front()->Close(why);
}

void ShardRouter::CloseAll(const Status& why) {
  auto unattached = unattached_;  // Close() calls back into OnClosed
  for (auto& c : unattached) c->Close(why);
  for (auto& [session, shard] : shards_) shard->CloseAll(why);
}

StatusOr<Shard*> ShardRouter::ShardFor(const WireHeader& attach) const {
  if (attach.op != Op::kAttach) {
    return absl::InvalidArgumentError(
        absl::StrCat("first message must be ATTACH, got ", OpName(attach.op)));
  }
  Shard* shard = Find(attach.iteration);
  if (shard == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(
        "ATTACH to core ", core_, " with a session of no job on this phubd: connect through "
        "the handshake (the job may have ended)"));
  }
  return shard;
}

StatusOr<std::span<std::byte>> ShardRouter::ResolveSlot(Connection& connection,
                                                        const WireHeader& header) {
  if (auto it = routed_.find(&connection); it != routed_.end()) {
    return it->second->ResolveSlot(connection, header);
  }
  PHUB_ASSIGN_OR_RETURN(Shard * shard, ShardFor(header));
  return shard->ResolveSlot(connection, header);  // checks the ATTACH as the shard sees it
}

Status ShardRouter::OnReceived(Connection& connection, const WireHeader& header) {
  if (auto it = routed_.find(&connection); it != routed_.end()) {
    return it->second->OnReceived(connection, header);
  }
  // The ATTACH ResolveSlot accepted; its job may have ended since.
  PHUB_ASSIGN_OR_RETURN(Shard * shard, ShardFor(header));
  auto it = std::find_if(unattached_.begin(), unattached_.end(),
                         [&](const auto& c) { return c.get() == &connection; });
  if (it == unattached_.end()) return absl::InternalError("ATTACH on a connection never adopted");
  std::shared_ptr<Connection> owned = *it;
  unattached_.erase(it);
  routed_[&connection] = shard;
  return shard->AdoptAttached(std::move(owned), header);
}

void ShardRouter::OnClosed(Connection& connection, const Status& why) {
  if (auto it = routed_.find(&connection); it != routed_.end()) {
    Shard* shard = it->second;
    routed_.erase(it);
    return shard->OnClosed(connection, why);
  }
  const auto erased =
      std::erase_if(unattached_, [&](const auto& c) { return c.get() == &connection; });
  if (erased == 0 || why.ok() || absl::IsCancelled(why)) return;
  // A flood of garbage connections must not become a flood of log lines.
  if (auto suppressed = drop_log_.Allow()) {
    spdlog::warn("core {}: dropped connection from {}: {}{}", core_, connection.peer(),
                 why.message(), LogLimiter::Note(*suppressed));
  }
}

StatusOr<std::vector<transport::LandingZone>> ShardRouter::LandingZones(
    const Connection& connection, const WireHeader* attach) {
  if (attach == nullptr) {
    return absl::InvalidArgumentError("a data connection must say who it is (ATTACH) first");
  }
  PHUB_ASSIGN_OR_RETURN(Shard * shard, ShardFor(*attach));
  return shard->LandingZones(connection, attach);
}

}  // namespace phub::server
