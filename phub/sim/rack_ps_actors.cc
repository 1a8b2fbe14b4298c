#include "phub/sim/rack_ps_actors.h"

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "phub/sim/chunks.h"
#include "phub/sim/streams.h"
#include "phub/sim/worker_actor.h"

namespace phub::sim {

namespace sg4 = simgrid::s4u;

namespace {

std::string Box(const char* what, std::size_t a, std::size_t b = 0) {
  return std::string(what) + std::to_string(a) + "_" + std::to_string(b);
}

// The simulation's connections, each an ordered Stream: (group, core) both ways between a
// group and its rack's PBox; (rack, home, lane) both ways between PBoxes, where a chunk of core
// k takes lane k % kPboxLanes: a rack's PBox reaches each home core on a connection of its
// own, but racks² x cores of them (131,072 at 64 racks of 16 cores) would be as many actors,
// and two lanes a pair already keep a chunk in flight while the next is summed.
constexpr std::size_t kPboxLanes = 2;
struct Connections {
  std::vector<Stream> up, down;            // [group * cores + core]
  std::vector<Stream> to_home, from_home;  // [(rack * racks + home) * lanes + lane]
};

}  // namespace

void StartRackPsActors(const Scenario& s, const Platform& platform, IterationLog& log) {
  const SharedChunks shared = SharedChunks::Of(s);
  const auto& chunks = shared.chunks;
  const std::size_t groups = platform.groups.size(), racks = s.racks, cores = s.ps_cores;
  log.Resize(groups, s.iterations);
  auto net = std::make_shared<Connections>();
  for (std::size_t g = 0; g < groups; ++g) {
    const std::size_t rack = platform.groups[g].rack;
    for (std::size_t k = 0; k < cores; ++k) {
      net->up.push_back(Stream::Open(Box("up", g, k), platform.groups[g].host));
      net->down.push_back(Stream::Open(Box("down", g, k), platform.servers[rack]));
    }
  }
  const std::size_t lanes = std::min(cores, kPboxLanes);
  for (std::size_t r = 0; r < racks; ++r) {
    for (std::size_t h = 0; h < racks; ++h) {
      for (std::size_t k = 0; k < lanes; ++k) {
        const std::string name = Box("rack", r, h) + "_" + std::to_string(k);
        net->to_home.push_back(Stream::Open("to" + name, platform.servers[r]));
        net->from_home.push_back(Stream::Open("from" + name, platform.servers[h]));
      }
    }
  }
  const auto between = [racks, lanes](std::size_t r, std::size_t h, std::size_t k) {
    return (r * racks + h) * lanes + k % lanes;
  };

  for (std::size_t g = 0; g < groups; ++g) {
    const WorkerGroup group = platform.groups[g];
    StartWorkerActor(s, log, g, group.host, shared, [g, group, cores, chunks, net](std::size_t c) {
      const SimChunk& chunk = (*chunks)[c];
      net->up[g * cores + chunk.rack_core].Send(Box("push", group.rack, chunk.rack_core),
                                               static_cast<double>(chunk.bytes) * group.members,
                                               const_cast<SimChunk*>(&chunk));
    }, Box("weights", g));
  }

  // Every PBox core runs one chunk's work at a time, its rack's sums and its homes' alike. A
  // core is three actors, whatever the number of chunks (so phubd's chunk size holds at any
  // number of racks): its rack part sums each chunk once every group of the rack has pushed
  // it, its home part once every rack's sum is in, its weights part sends each chunk's weights
  // on to the rack's workers. Messages carry their chunk (Stream::Send's `what`).
  auto locks = std::make_shared<std::vector<sg4::MutexPtr>>();  // [rack * cores + core]
  for (std::size_t k = 0; k < racks * cores; ++k) locks->push_back(sg4::Mutex::create());
  const double per_byte = CoreSecondsPerByteIn(s);
  const auto work = [locks, cores, per_byte](std::size_t rack, std::uint32_t on_core,
                                             const SimChunk& chunk, double copies) {
    sg4::MutexPtr core = (*locks)[rack * cores + on_core];
    core->lock();
    sg4::this_actor::execute(per_byte * static_cast<double>(chunk.bytes) * copies * kFlopsPerSecond);
    core->unlock();
  };
  const auto index = [chunks](void* what) {
    return static_cast<std::size_t>(static_cast<const SimChunk*>(what) - chunks->data());
  };
  // Counts a chunk's arrivals; true (and forgets it) when the `expected`-th has come.
  const auto complete = [](std::unordered_map<std::size_t, std::uint32_t>& counts, std::size_t c,
                           std::uint32_t expected) {
    if (++counts[c] < expected) return false;
    counts.erase(c);
    return true;
  };
  for (std::size_t r = 0; r < racks; ++r) {
    std::vector<std::size_t> mine;
    for (std::size_t g = 0; g < groups; ++g) {
      if (platform.groups[g].rack == r) mine.push_back(g);
    }
    const double rack_workers = static_cast<double>(s.workers / s.racks);
    for (std::uint32_t k = 0; k < cores; ++k) {
      sg4::Actor::create(Box("part", r, k), platform.servers[r],
                         [r, k, mine, rack_workers, work, index, complete, chunks, net, between] {
        Own(Box("push", r, k));
        std::unordered_map<std::size_t, std::uint32_t> counts;
        for (;;) {
          void* what = Receive(Box("push", r, k));
          const std::size_t c = index(what);
          if (!complete(counts, c, static_cast<std::uint32_t>(mine.size()))) continue;
          const SimChunk& chunk = (*chunks)[c];
          work(r, k, chunk, rack_workers);
          // The rack's sum to the home (to itself, no link, at the home).
          net->to_home[between(r, chunk.server, chunk.core)].Send(
              Box("home", chunk.server, chunk.core),
              r == chunk.server ? 0.0 : static_cast<double>(chunk.bytes), what);
        }
      })->daemonize();
      sg4::Actor::create(Box("home", r, k), platform.servers[r],
                         [r, k, racks, work, index, complete, chunks, net, between] {
        Own(Box("home", r, k));
        std::unordered_map<std::size_t, std::uint32_t> counts;
        for (;;) {
          void* what = Receive(Box("home", r, k));
          const std::size_t c = index(what);
          if (!complete(counts, c, static_cast<std::uint32_t>(racks))) continue;
          const SimChunk& chunk = (*chunks)[c];
          work(r, k, chunk, static_cast<double>(racks));
          for (std::size_t to = 0; to < racks; ++to) {
            net->from_home[between(to, r, k)].Send(
                Box("rackweights", to, chunk.rack_core),
                to == r ? 0.0 : static_cast<double>(chunk.bytes), what);
          }
        }
      })->daemonize();
      sg4::Actor::create(Box("rackweights", r, k), platform.servers[r],
                         [&platform, r, k, mine, cores, chunks, index, net] {
        Own(Box("rackweights", r, k));
        for (;;) {
          const SimChunk& chunk = (*chunks)[index(Receive(Box("rackweights", r, k)))];
          for (std::size_t g : mine) {
            net->down[g * cores + k].Send(
                Box("weights", g), static_cast<double>(chunk.bytes) * platform.groups[g].members);
          }
        }
      })->daemonize();
    }
  }
}

}  // namespace phub::sim
