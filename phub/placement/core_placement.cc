#include "phub/placement/core_placement.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <numeric>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace phub::placement {

namespace {

bool IsLocal(int core_node, int nic_node) {
  return core_node < 0 || nic_node < 0 || core_node == nic_node;
}

CoreSite SiteOf(const PhysicalCore& core, std::uint32_t nic, int nic_node) {
  return {core.index, core.first_cpu, core.numa_node, nic, IsLocal(core.numa_node, nic_node)};
}

// What an operator reads for a core serving a NIC on another node, or NICs left idle.
void WarnAbout(const Placement& placement, const std::vector<int>& nic_nodes,
               std::vector<std::string>& warnings) {
  std::vector<std::uint32_t> served(nic_nodes.size(), 0);
  for (std::size_t i = 0; i < placement.cores.size(); ++i) {
    const CoreSite& site = placement.cores[i];
    ++served[site.nic];
    if (!site.nic_is_local) {
      warnings.push_back(absl::StrCat(
          "server core ", i, " (physical core ", site.physical_core, ", NUMA node ",
          site.numa_node, ") serves NIC ", site.nic, " on node ", nic_nodes[site.nic],
          ": its bytes cross the socket interconnect"));
    }
  }
  for (std::size_t k = 0; k < served.size(); ++k) {
    if (served[k] == 0) {
      warnings.push_back(absl::StrCat("NIC ", k, " serves no core: with ",
                                      placement.cores.size(), " cores for ", served.size(),
                                      " NICs its link idles; give --cores ", served.size(),
                                      " or more"));
    }
  }
  std::set<int> used;
  for (const CoreSite& site : placement.cores) {
    if (!used.insert(site.physical_core).second) {
      warnings.push_back(absl::StrCat("physical core ", site.physical_core,
                                      " runs more than one server core: they take turns"));
      break;
    }
  }
}

}  // namespace

StatusOr<Placement> PlaceCores(const Machine& machine, const std::vector<int>& nic_nodes,
                               std::uint32_t cores, int first_core) {
  if (nic_nodes.empty()) return absl::InvalidArgumentError("no NIC to place cores at");
  if (cores == 0) return absl::InvalidArgumentError("--cores must be at least 1");
  if (first_core < 0) return absl::InvalidArgumentError("--first-core must be 0 or more");
  const std::vector<PhysicalCore>& all = machine.cores();
  const int n = static_cast<int>(all.size());
  // Free cores are searched from --first-core on, wrapping around.
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = (first_core + i) % n;
  const std::set<int> nic_homes(nic_nodes.begin(), nic_nodes.end());
  std::vector<bool> taken(n, false);
  auto first_free = [&](auto&& fits) -> std::optional<int> {
    for (int c : order) {
      if (!taken[c] && fits(all[c])) return c;
    }
    return std::nullopt;
  };
  // A free core for NIC k without breaking the rule: one on its node, else one from a node
  // that has no NIC of its own (an unknown node's NIC: then any).
  auto free_core_for = [&](std::size_t k) -> std::optional<int> {
    const int home = nic_nodes[k];
    if (home >= 0) {
      if (auto c = first_free([&](const PhysicalCore& p) { return p.numa_node == home; })) {
        return c;
      }
    }
    if (auto c = first_free([&](const PhysicalCore& p) {
          return p.numa_node < 0 || !nic_homes.contains(p.numa_node);
        })) {
      return c;
    }
    if (home < 0) return first_free([](const PhysicalCore&) { return true; });
    return std::nullopt;
  };

  Placement placement;
  std::vector<std::uint32_t> served(nic_nodes.size(), 0);
  std::vector<std::size_t> by_load(nic_nodes.size());
  std::map<int, std::uint32_t> node_cores;  // server cores placed on each node so far
  bool shared = false;
  for (std::uint32_t i = 0; i < cores; ++i) {
    // The NICs with fewest cores so far ask first, so cores alternate over the NICs; among
    // those, the NIC whose node has fewest cores yet, so NICs left idle (fewer cores than
    // NICs) are not all on one socket.
    std::iota(by_load.begin(), by_load.end(), 0);
    auto node_load = [&](std::size_t k) {
      return nic_nodes[k] < 0 ? 0 : node_cores[nic_nodes[k]];
    };
    std::stable_sort(by_load.begin(), by_load.end(), [&](std::size_t a, std::size_t b) {
      if (served[a] != served[b]) return served[a] < served[b];
      return node_load(a) < node_load(b);
    });
    std::optional<std::pair<std::size_t, int>> pick;
    for (std::size_t k : by_load) {
      if (auto c = free_core_for(k)) {
        pick.emplace(k, *c);
        break;
      }
    }
    if (!pick) {
      // Every free core is on a node with NICs of its own, all of which already got their
      // share: the core serves the least loaded of those (local, so more cores than the
      // others there), else every core is taken and they are shared.
      if (auto c = first_free([](const PhysicalCore&) { return true; })) {
        for (std::size_t k : by_load) {
          if (nic_nodes[k] == all[*c].numa_node) {
            pick.emplace(k, *c);
            break;
          }
        }
      } else {
        // Every core is taken: they are shared, each still serving a NIC of its own node.
        shared = true;
        const int reused = order[i % n];
        pick.emplace(by_load.front(), reused);
        for (std::size_t k : by_load) {
          if (IsLocal(all[reused].numa_node, nic_nodes[k])) {
            pick.emplace(k, reused);
            break;
          }
        }
      }
    }
    const auto [k, c] = *pick;
    taken[c] = true;
    ++served[k];
    ++node_cores[all[c].numa_node];
    placement.cores.push_back(SiteOf(all[c], static_cast<std::uint32_t>(k), nic_nodes[k]));
  }
  if (shared) {
    placement.warnings.push_back(absl::StrCat("--cores ", cores, " is more than the ", n,
                                              " physical cores hwloc sees"));
  }
  WarnAbout(placement, nic_nodes, placement.warnings);
  return placement;
}

StatusOr<Placement> ParseCoreMap(const Machine& machine, const std::vector<int>& nic_nodes,
                                 std::uint32_t cores, const std::string& map) {
  const std::vector<PhysicalCore>& all = machine.cores();
  std::vector<std::string> entries = absl::StrSplit(map, ',');
  if (entries.size() != cores) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--core-map '", map, "' has ", entries.size(), " entries for --cores ", cores,
        ": give one PHYSICAL_CORE@NIC per server core, e.g. 0@0,1@1"));
  }
  auto number = [](std::string_view text, int& out) {
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
    return ec == std::errc() && end == text.data() + text.size() && out >= 0;
  };
  Placement placement;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    std::vector<std::string> parts = absl::StrSplit(entries[i], '@');
    int physical = 0, nic = 0;
    if (parts.size() != 2 || !number(parts[0], physical) || !number(parts[1], nic)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--core-map entry ", i, " '", entries[i], "' is not PHYSICAL_CORE@NIC (e.g. 8@1)"));
    }
    if (physical >= static_cast<int>(all.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--core-map entry ", i, " '", entries[i], "': physical core ", physical,
          " is not there (hwloc sees ", all.size(), ": 0..", all.size() - 1, ")"));
    }
    if (nic >= static_cast<int>(nic_nodes.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--core-map entry ", i, " '", entries[i], "': NIC ", nic, " is not there (--nics lists ",
          nic_nodes.size(), ": 0..", nic_nodes.size() - 1, ")"));
    }
    placement.cores.push_back(
        SiteOf(all[physical], static_cast<std::uint32_t>(nic), nic_nodes[nic]));
  }
  WarnAbout(placement, nic_nodes, placement.warnings);
  return placement;
}

std::string FormatCoreMap(const Placement& placement) {
  return absl::StrJoin(placement.cores, ",", [](std::string* out, const CoreSite& site) {
    absl::StrAppend(out, site.physical_core, "@", site.nic);
  });
}

}  // namespace phub::placement
