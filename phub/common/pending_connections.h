// Connections that have not yet shown they belong (a control connection before its Hello is
// accepted, a metrics connection before its request is answered): the one thing anyone who
// reaches a port can make phubd hold. Each source address gets a small quota of them, and all
// sources together a larger one; when the total is reached the OLDEST pending connection gives
// way to the new one, so a flood of idle connections cannot keep a real peer out: a real peer
// proves itself within a round trip of connecting, a flood's connections only wait.
// (docs/operations.md "Security model"; docs/design.md "Admission that cannot be squatted".)
//
// Bookkeeping only: the owner closes what it is told to. Not thread-safe: one per event loop.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>

namespace phub {

struct PendingLimits {
  std::uint32_t per_source = 16;  // pending connections one source address may hold
  std::uint32_t total = 256;      // all sources together
};

class PendingConnections {
 public:
  explicit PendingConnections(PendingLimits limits) : limits_(limits) {}

  struct Admission {
    bool admitted = false;  // false: the source is at its quota; close the new connection
    // Admitted at the total: the oldest pending connection, which the owner must close now.
    std::optional<std::uint64_t> evict;
  };
  // A new connection `id` (ids must increase: their order is the connections' age) from
  // `source`, an address without its port.
  Admission Admit(const std::string& source, std::uint64_t id);
  // Connection `id` proved itself or closed; nothing if it was not pending.
  void Done(std::uint64_t id);

  std::size_t size() const { return by_id_.size(); }
  std::uint32_t of_source(const std::string& source) const;
  const PendingLimits& limits() const { return limits_; }

 private:
  PendingLimits limits_;
  std::map<std::uint64_t, std::string> by_id_;  // oldest first
  std::unordered_map<std::string, std::uint32_t> per_source_;
};

}  // namespace phub
