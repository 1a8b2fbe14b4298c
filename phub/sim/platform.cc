#include "phub/sim/platform.h"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <string>

#include "phub/sim/pacing.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

double WorkerBytesPerSecond(const Scenario& s) {
  return s.link_gbps * 1e9 / 8 * s.calibration.link_goodput;
}

double UplinkBytesPerSecond(const Scenario& s) {
  return s.racks > 1 ? s.uplink_gbps * 1e9 / 8 * s.calibration.link_goodput : 0;
}

double PboxBytesPerSecond(const Scenario& s) {
  if (s.ps_nic_gbps > 0) return s.ps_nics * s.ps_nic_gbps * 1e9 / 8 * s.calibration.link_goodput;
  if (s.network == Network::kCloud) return WorkerBytesPerSecond(s);
  return static_cast<double>(s.workers / s.racks) * WorkerBytesPerSecond(s) + UplinkBytesPerSecond(s);
}

double NicBytesPerSecond(const Scenario& s) { return PboxBytesPerSecond(s) / s.ps_nics; }

namespace {

// A host's two links to its rack's switch, and what it is: a PS host's (`server`, one of its
// NICs) or a worker group of `job`.
struct Port {
  sg4::Host* host;
  const sg4::Link* up;
  const sg4::Link* down;
  std::uint32_t rack;
  int server = -1;
  std::uint32_t job = 0;
};

class Builder {
 public:
  Builder(const Scenario& s, double members) : s_(s), zone_(sg4::create_full_zone("cluster")),
                                               members_(members), paced_(PacedJobBytesPerSecond(s)) {
    for (std::uint32_t r = 0; s.racks > 1 && r < s.racks; ++r) {
      const std::string name = "uplink" + std::to_string(r);
      const double raw = s.uplink_gbps * 1e9 / 8;
      if (Overloadable()) {
        uplinks_.push_back({IncastLink(name + "_up", raw), IncastLink(name + "_down", raw)});
      } else {
        uplinks_.push_back({Link(name + "_up", raw * s.calibration.link_goodput),
                            Link(name + "_down", raw * s.calibration.link_goodput)});
      }
    }
  }

  // A worker group's host of `job`, whose links run at `bytes_per_second` each way.
  sg4::Host* Host(const std::string& name, double bytes_per_second, std::uint32_t rack,
                  std::uint32_t job) {
    sg4::Host* host = zone_->create_host(name, kFlopsPerSecond)->seal();
    ports_.push_back({host, Link(name + "_up", bytes_per_second),
                      Link(name + "_down", bytes_per_second), rack, -1, job});
    return host;
  }

  // A PS host, a host per NIC: each NIC's outgoing link shared as any, its incoming link with
  // the calibrated incast; each with the cores that serve it (at least one to be a host).
  std::vector<sg4::Host*> Server(const std::string& name, std::uint32_t rack) {
    const double raw = NicBytesPerSecond(s_) / s_.calibration.link_goodput;
    const int server = static_cast<int>(pace_.size());
    pace_.emplace_back();
    for (std::size_t j = 0; j < paced_.size(); ++j) {
      pace_.back().push_back(zone_->create_link(name + "_pace" + std::to_string(j), paced_[j])->seal());
    }
    std::vector<sg4::Host*> nics;
    for (std::uint32_t n = 0; n < s_.ps_nics; ++n) {
      const std::uint32_t cores = s_.ps_cores / s_.ps_nics + (n < s_.ps_cores % s_.ps_nics ? 1 : 0);
      const std::string nic = n == 0 ? name : name + "_nic" + std::to_string(n);
      sg4::Host* host = zone_->create_host(nic, kFlopsPerSecond)
                            ->set_core_count(static_cast<int>(std::max<std::uint32_t>(1, cores)))
                            ->seal();
      ports_.push_back({host, Link(nic + "_up", raw * s_.calibration.link_goodput),
                        Overloadable() ? IncastLink(nic + "_down", raw)
                                       : Link(nic + "_down", raw * s_.calibration.link_goodput),
                        rack, server, 0});
      nics.push_back(host);
    }
    return nics;
  }

  // Every route between two hosts: the sender's link up, the racks' uplinks if they differ,
  // the receiver's link down; from a PS host to a paced job's group, the job's pace too.
  void Seal() {
    for (const Port& from : ports_) {
      for (const Port& to : ports_) {
        if (from.host == to.host) continue;
        std::vector<sg4::LinkInRoute> links = {sg4::LinkInRoute(from.up)};
        if (from.rack != to.rack) {
          links.emplace_back(uplinks_[from.rack].first);
          links.emplace_back(uplinks_[to.rack].second);
        }
        if (from.server >= 0 && to.server < 0 && !paced_.empty()) {
          links.emplace_back(pace_[from.server][to.job]);
        }
        links.emplace_back(to.down);
        zone_->add_route(from.host->get_netpoint(), to.host->get_netpoint(), nullptr, nullptr,
                         links, false);
      }
    }
    zone_->seal();
  }

 private:
  const sg4::Link* Link(const std::string& name, double bytes_per_second) {
    // The tree's hops add the latency themselves (tree_actors.h).
    const double latency = s_.scheme == Scheme::kTree ? 0 : s_.latency_us * 1e-6;
    return zone_->create_link(name, bytes_per_second)->set_latency(latency)->seal();
  }

  // Whether the workers' pushes can overload a PS host's way in or an uplink. Not in racks of
  // racks (a rack's PBox takes only its rack's workers, at most its link's rate; the core
  // carries one copy a rack a chunk, on a few PBox-to-PBox connections) nor into a one-NIC
  // PBox of N links in one rack: there the incast's goodput is the link's, constant, and a
  // plain link gives the same shares while SimGrid solves it incrementally (a NONLINEAR link
  // is solved again at every event: BERT-large's 4,096 workers in 64 racks took 9 minutes
  // with them).
  bool Overloadable() const {
    if (s_.scheme == Scheme::kPsRacks) return false;
    return !(s_.scheme == Scheme::kPs && s_.network == Network::kPbox && s_.racks == 1 &&
             s_.ps_nics == 1 && s_.ps_nic_gbps == 0);
  }

  // A link (of `raw` bytes a second before the goodput) that the PS's pushes may overload: a
  // PS host's (NIC's) way in, a rack's uplink. Its capacity follows the calibrated incast: each
  // flow through it is a worker group's connection to one core of one PS host, standing for
  // `members_` workers' whose links' rate is spread over those connections (calibration.h).
  const sg4::Link* IncastLink(const std::string& name, double raw) {
    const Calibration c = s_.calibration;
    const double per_flow =
        members_ * s_.link_gbps * 1e9 / 8 / (static_cast<double>(s_.ps_cores) * s_.ps_hosts);
    const auto incast = [c, per_flow](double capacity, int flows) {
      const double overload = flows * per_flow / capacity;
      const double goodput =
          overload <= 1 ? c.link_goodput
                        : std::min(c.link_goodput, c.incast_floor + c.incast_slope / overload);
      return capacity * goodput;
    };
    return zone_->create_link(name, raw)
        ->set_latency(s_.latency_us * 1e-6)
        ->set_sharing_policy(sg4::Link::SharingPolicy::NONLINEAR, incast)
        ->seal();
  }

  const Scenario& s_;
  sg4::NetZone* zone_;
  std::vector<std::pair<const sg4::Link*, const sg4::Link*>> uplinks_;  // by rack: up, down
  std::vector<Port> ports_;
  double members_;  // workers a group host stands for
  std::vector<double> paced_;  // per job: its paced rate from a PS host (empty: not paced)
  std::vector<std::vector<const sg4::Link*>> pace_;  // [server][job]
};

// The largest divisor of `n` that is at most `most` (at least 1).
std::uint32_t LargestDivisorAtMost(std::uint32_t n, std::uint32_t most) {
  std::uint32_t d = std::max<std::uint32_t>(1, std::min(n, most));
  while (n % d != 0) --d;
  return d;
}

}  // namespace

Platform BuildPlatform(const Scenario& s) {
  Platform platform;
  const std::vector<Job> jobs = JobsOf(s);  // several: one rack (Check)
  const std::uint32_t hosts_per_rack = std::max<std::uint32_t>(1, s.max_worker_hosts / s.racks);
  const std::uint32_t hosts_per_job =
      std::max<std::uint32_t>(1, hosts_per_rack / static_cast<std::uint32_t>(jobs.size()));
  // Groups of each job in each rack: equal groups (a divisor of its workers there).
  std::vector<std::uint32_t> groups;
  std::uint32_t all_groups = 0;
  for (const Job& job : jobs) {
    groups.push_back(LargestDivisorAtMost(job.workers / s.racks, hosts_per_job));
    all_groups += groups.back() * s.racks;
  }
  const bool allreduce = s.scheme == Scheme::kRing || s.scheme == Scheme::kTree;
  Builder builder(s, allreduce ? 1.0 : static_cast<double>(s.workers) / all_groups);
  for (std::uint32_t r = 0; r < s.racks; ++r) {
    if (allreduce) {
      // Every link of a ring carries one segment each way a step: a ring of fewer hosts, each
      // one worker, merging the N-worker ring's steps (ring_actors.cc) takes the same time. A
      // tree's links carry as much at any size; its depth is added (tree_actors.h).
      for (std::uint32_t g = 0; g < std::min(s.workers / s.racks, hosts_per_rack); ++g) {
        const std::string name = "w" + std::to_string(r) + "_" + std::to_string(g);
        platform.groups.push_back({builder.Host(name, WorkerBytesPerSecond(s), r, 0), 1, r, 0});
      }
      continue;
    }
    for (std::uint32_t j = 0; j < jobs.size(); ++j) {
      const std::uint32_t members = jobs[j].workers / s.racks / groups[j];
      for (std::uint32_t g = 0; g < groups[j]; ++g) {
        const std::string name = "w" + std::to_string(r) + "_" + std::to_string(g) +
                                 (jobs.size() > 1 ? "_job" + std::to_string(j) : "");
        platform.groups.push_back(
            {builder.Host(name, members * WorkerBytesPerSecond(s), r, j), members, r, j});
      }
    }
  }
  if (!allreduce) {
    // One rack: ps_hosts servers in it. Racks: rack 0's PBox, or every rack's.
    const std::uint32_t servers = s.scheme == Scheme::kPsRacks ? s.racks : s.ps_hosts;
    for (std::uint32_t k = 0; k < servers; ++k) {
      platform.nics.push_back(builder.Server("ps" + std::to_string(k), s.racks > 1 ? k : 0));
      platform.servers.push_back(platform.nics.back().front());
    }
  }
  builder.Seal();
  return platform;
}

}  // namespace phub::sim
