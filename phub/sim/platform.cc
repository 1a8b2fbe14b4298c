#include "phub/sim/platform.h"

#include <simgrid/s4u.hpp>

#include <string>

namespace phub::sim {

namespace sg4 = simgrid::s4u;

double WorkerBytesPerSecond(const Scenario& s) {
  return s.link_gbps * 1e9 / 8 * s.calibration.link_goodput;
}

double PboxBytesPerSecond(const Scenario& s) {
  const double workers = s.network == Network::kPbox ? s.workers : 1;
  return workers * WorkerBytesPerSecond(s);
}

namespace {

// A host of the star with its private link (split duplex: sending and receiving do not share).
sg4::Host* AddHost(sg4::NetZone* star, const std::string& name, double bytes_per_second,
                   double latency_s, int cores) {
  sg4::Host* host = star->create_host(name, kFlopsPerSecond)->set_core_count(cores)->seal();
  const sg4::Link* link =
      star->create_split_duplex_link(name + "_link", bytes_per_second)->set_latency(latency_s)->seal();
  star->add_route(host->get_netpoint(), nullptr, nullptr, nullptr,
                  {{link, sg4::LinkInRoute::Direction::UP}}, true);
  return host;
}

}  // namespace

Platform BuildPlatform(const Scenario& s) {
  sg4::NetZone* star = sg4::create_star_zone("cluster");
  Platform platform;
  const double latency_s = s.latency_us * 1e-6;
  if (s.scheme == Scheme::kRing) {
    // Every link of a ring on a star carries the same flow each step: a ring of fewer hosts,
    // each one worker, with the N-worker ring's steps and segments takes the same time.
    const std::uint32_t hosts = std::min(s.workers, s.max_worker_hosts);
    for (std::uint32_t g = 0; g < hosts; ++g) {
      platform.groups.push_back(
          {AddHost(star, "w" + std::to_string(g), WorkerBytesPerSecond(s), latency_s, 1), 1});
    }
  } else {
    // Groups of equal size (the largest divisor of N within max_worker_hosts): max-min sharing
    // gives every flow of a link the same share, so a group's flow stands for its members' only
    // when every group has as many.
    std::uint32_t hosts = std::min(s.workers, s.max_worker_hosts);
    while (s.workers % hosts != 0) --hosts;
    const std::uint32_t members = s.workers / hosts;
    for (std::uint32_t g = 0; g < hosts; ++g) {
      platform.groups.push_back(
          {AddHost(star, "w" + std::to_string(g), members * WorkerBytesPerSecond(s), latency_s, 1),
           members});
    }
  }
  if (s.scheme == Scheme::kPs) {
    for (std::uint32_t k = 0; k < s.ps_hosts; ++k) {
      platform.servers.push_back(AddHost(star, "ps" + std::to_string(k), PboxBytesPerSecond(s),
                                         latency_s, static_cast<int>(s.ps_cores)));
    }
  }
  star->seal();
  return platform;
}

}  // namespace phub::sim
