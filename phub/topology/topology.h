// Racks of racks (docs/design.md "Racks of racks"): the cluster's racks as one topology file
// describes them (proto/topology.proto gives the format), checked once where it is read. Every
// PBox reads it to find its peers, every worker to find its rack's PBox and its ranks; all
// read the same file, so all agree on the racks' order, which fixes the order partial sums are
// added in (ranks within a rack, then racks by index).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "phub/common/endpoint.h"
#include "phub/common/status.h"

namespace phub::topology {

inline constexpr std::uint32_t kMaxRacks = 256;
inline constexpr std::uint32_t kMaxHosts = 65536;
inline constexpr std::size_t kMaxFileBytes = 4 << 20;

struct Rack {
  std::string name;
  Endpoint pbox;  // its phubd's control address
  std::vector<std::string> hosts;
};

// Where one worker stands: its rack, its rank among the rack's workers (what its PBox knows it
// by) and among all (what it shards its data by).
struct Placement {
  std::uint32_t racks = 0;  // in the file
  std::uint32_t rack = 0;
  std::uint32_t rank_in_rack = 0;
  std::uint32_t rack_size = 0;
  std::uint32_t rank = 0;
  std::uint32_t world_size = 0;
  Endpoint pbox;  // its rack's phubd
};

// This machine's host name (gethostname): a worker's place in the file unless it is told
// another (--hostname).
std::string ThisHostName();

class Topology {
 public:
  // `origin` (the file's name) is what errors name. InvalidArgument, naming the line for a
  // syntax error and the rack or host otherwise, for: no rack; a rack without a name, with a
  // name not of [A-Za-z0-9._-] or used twice; without a pbox (a missing PBox), or one not
  // HOST:PORT, or one two racks share; without hosts; a host in two racks (or twice in one);
  // over kMaxRacks racks or kMaxHosts hosts.
  static StatusOr<Topology> Parse(std::string_view text, std::string_view origin);
  // Reads and parses `path` (at most kMaxFileBytes).
  static StatusOr<Topology> Load(const std::string& path);

  const std::vector<Rack>& racks() const { return racks_; }
  std::uint32_t world_size() const { return world_size_; }
  const std::string& origin() const { return origin_; }
  // The rack named `name`: NotFound listing the racks there are.
  StatusOr<std::uint32_t> RackIndex(std::string_view name) const;
  // The worker on `host`: NotFound naming the file and how to fix it when no rack has it.
  StatusOr<Placement> Locate(std::string_view host) const;

 private:
  std::vector<Rack> racks_;
  std::uint32_t world_size_ = 0;
  std::string origin_;
};

}  // namespace phub::topology
