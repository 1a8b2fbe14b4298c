// ShardRouter: a lane's data connections (core_lane.h: one job on one core), routed to its
// job's shard.
// A connection is held here until its ATTACH names a job by its session (a per-job secret that
// only the job's members got in their Welcome); from then on it belongs to that job's shard,
// and every message on it goes there and nowhere else: a peer attached to one job cannot reach
// another's chunks. An ATTACH naming no job here is refused (PermissionDenied) like one that
// names a rank the job does not have.
//
// Threading: the lane's thread only (it is the ConnectionHandler of every data connection the
// lane accepts). It holds one shard since each job has its own lane; a connection whose ATTACH
// names another job's session is refused like a guess.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <unordered_map>
#include <vector>

#include "phub/common/log_limiter.h"
#include "phub/server/shard/shard.h"
#include "phub/transport/connection.h"

namespace phub::server {

// "10.0.0.5" of a Connection::peer() "10.0.0.5:41234" (the last colon: IPv6 peers are
// printed without brackets, so the part before it is still the address).
std::string AddressOf(const std::string& peer);

class ShardRouter final : public transport::ConnectionHandler {
 public:
  explicit ShardRouter(keys::CoreIndex core) : core_(core) {}
  ~ShardRouter() override;

  void Add(std::uint64_t session, std::unique_ptr<Shard> shard);
  // Closes the shard's connections and hands it back (its stats), or null.
  std::unique_ptr<Shard> Remove(std::uint64_t session, const Status& why);
  Shard* Find(std::uint64_t session) const;
  bool empty() const { return shards_.empty(); }
  std::size_t size() const { return shards_.size(); }
  std::vector<Shard*> shards() const;

  // A freshly accepted connection: started, held until its ATTACH.
  void Adopt(std::shared_ptr<transport::Connection> connection);
  std::size_t unattached() const { return unattached_.size(); }
  // Connections not yet attached whose peer is at `address` (a peer() without its port).
  std::size_t unattached_from(const std::string& address) const;
  // Closes the connection not yet attached that came first (nothing if none).
  void CloseOldestUnattached(const Status& why);
  // Closes every connection, attached or not (phubd stops).
  void CloseAll(const Status& why);

  // ConnectionHandler
  StatusOr<std::span<std::byte>> ResolveSlot(transport::Connection& connection,
                                             const transport::WireHeader& header) override;
  Status OnReceived(transport::Connection& connection,
                    const transport::WireHeader& header) override;
  void OnClosed(transport::Connection& connection, const Status& why) override;
  StatusOr<std::vector<transport::LandingZone>> LandingZones(
      const transport::Connection& connection, const transport::WireHeader* attach) override;

 private:
  // The shard an ATTACH names, or why there is none.
  StatusOr<Shard*> ShardFor(const transport::WireHeader& attach) const;

  keys::CoreIndex core_;
  std::map<std::uint64_t, std::unique_ptr<Shard>> shards_;  // by session
  std::vector<std::shared_ptr<transport::Connection>> unattached_;
  std::unordered_map<const transport::Connection*, Shard*> routed_;  // attached connections
  LogLimiter drop_log_;  // connections dropped before they attached
};

}  // namespace phub::server
