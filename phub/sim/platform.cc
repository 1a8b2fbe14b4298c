#include "phub/sim/platform.h"

#include <simgrid/s4u.hpp>

#include <algorithm>
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

// A PS host: its outgoing link shared as any (its own sends), its incoming link with the
// calibrated incast (calibration.h): the flows into it are `flows_per_sender` a sending host,
// each host standing for `members` workers whose links run at `sender_bytes_per_second`.
sg4::Host* AddServer(sg4::NetZone* star, const std::string& name, double raw_bytes_per_second,
                     double latency_s, int cores, const Calibration& c, double members,
                     double flows_per_sender, double sender_bytes_per_second) {
  sg4::Host* host = star->create_host(name, kFlopsPerSecond)->set_core_count(cores)->seal();
  const sg4::Link* up = star->create_link(name + "_up", raw_bytes_per_second * c.link_goodput)
                            ->set_latency(latency_s)
                            ->seal();
  const auto incast = [c, members, flows_per_sender, sender_bytes_per_second](double capacity,
                                                                              int flows) {
    const double offered = flows / flows_per_sender * members * sender_bytes_per_second;
    const double overload = offered / capacity;
    const double goodput =
        overload <= 1 ? c.link_goodput
                      : std::min(c.link_goodput, c.incast_floor + c.incast_slope / overload);
    return capacity * goodput;
  };
  const sg4::Link* down = star->create_link(name + "_down", raw_bytes_per_second)
                              ->set_latency(latency_s)
                              ->set_sharing_policy(sg4::Link::SharingPolicy::NONLINEAR, incast)
                              ->seal();
  star->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, {sg4::LinkInRoute(up)}, false);
  star->add_route(nullptr, host->get_netpoint(), nullptr, nullptr, {sg4::LinkInRoute(down)},
                  false);
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
    const double members = platform.groups.front().members;
    for (std::uint32_t k = 0; k < s.ps_hosts; ++k) {
      // Each worker pushes to a host on one connection per core (ps_actors.h), its link's rate
      // spread over the hosts it pushes to at once.
      platform.servers.push_back(AddServer(
          star, "ps" + std::to_string(k), PboxBytesPerSecond(s) / s.calibration.link_goodput,
          latency_s, static_cast<int>(s.ps_cores), s.calibration, members, s.ps_cores,
          WorkerBytesPerSecond(s) / s.calibration.link_goodput / s.ps_hosts));
    }
  }
  star->seal();
  return platform;
}

}  // namespace phub::sim
